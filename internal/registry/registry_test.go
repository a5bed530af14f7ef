package registry

import (
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/lease/driver"
)

// TestARegisteredTaskIsRebuiltAsWritten: what the registry keeps of a
// config's task (Task.Info) rebuilds a task with the same schedule and
// zone, for an interval and for cron; an entry this version cannot read is
// still an orphan (hourly, in UTC), and a task the config lists is none.
func TestARegisteredTaskIsRebuiltAsWritten(t *testing.T) {
	cfg, err := config.Parse("t.toml", []byte(`
[[tasks]]
name = "every"
every = "15m"
command = ["true"]
timezone = "Europe/Paris"

[[tasks]]
name = "cron"
cron = "*/5 * * * *"
command = ["true"]
`))
	if err != nil {
		t.Fatal(err)
	}
	var reg []driver.TaskInfo
	for _, task := range cfg.Tasks {
		ti := leaseconf.TaskInfo(&task)
		back, err := RegisteredTask(ti)
		if err != nil {
			t.Fatalf("%s: %v", task.Name, err)
		}
		if back.ScheduleText() != task.ScheduleText() || back.Location.String() != task.Location.String() {
			t.Errorf("%s rebuilt as %q in %s, want %q in %s", task.Name, back.ScheduleText(), back.Location, task.ScheduleText(), task.Location)
		}
		at := time.Date(2026, 11, 27, 10, 3, 0, 0, time.UTC)
		if got, want := back.Schedule.Next(at), task.Schedule.Next(at); !got.Equal(want) {
			t.Errorf("%s: next tick after %v is %v rebuilt, %v in the config", task.Name, at, got, want)
		}
		reg = append(reg, ti)
	}
	reg = append(reg, driver.TaskInfo{Name: "gone", Schedule: "every 1h", Timezone: "UTC"},
		driver.TaskInfo{Name: "odd", Schedule: "sometimes", Timezone: "Nowhere/Else"})
	orphans := Orphans(cfg, reg)
	var names []string
	for _, o := range orphans {
		names = append(names, o.Name)
	}
	if !slices.Equal(names, []string{"gone", "odd"}) {
		t.Fatalf("orphans %v, want [gone odd]", names)
	}
	if odd := orphans[1]; odd.Every != time.Hour || odd.Location != time.UTC || odd.Info.Schedule != "sometimes" {
		t.Errorf("an unreadable entry is rebuilt as every %v in %v (kept %q), want hourly in UTC", odd.Every, odd.Location, odd.Info.Schedule)
	}
}

// TestForgottenAndRunners: a forgotten task expects no tick; the runners
// of a task are the replicas that announce it.
func TestForgottenAndRunners(t *testing.T) {
	f := ForgottenTask("old")
	if !Forgotten(f) || !f.Schedule.Next(time.Now()).IsZero() {
		t.Fatal("a forgotten task must expect no tick")
	}
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if task, _ := cfg.Task("a"); Forgotten(task) {
		t.Fatal("a config's task is not forgotten")
	}
	rs := []driver.Replica{{ID: "r1", Tasks: []string{"a", "b"}}, {ID: "r2", Tasks: []string{"b"}}, {ID: "r3"}}
	if got := RunnerIDs(rs, "b"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("runners of b: %v, want [r1 r2]", got)
	}
}
