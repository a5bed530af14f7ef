package ops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
)

var bg = context.Background()

// setup is an in-process store and the task "t" of entities a, b, c.
func setup(t *testing.T) (*lease.Store, *config.Task) {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"t\"\nevery = \"1m\"\ncommand = [\"true\"]\nentities = [\"a\", \"b\", \"c\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := stores.Memory(lease.Options{Replica: "r1"})
	t.Cleanup(func() { s.Stop(bg) }) //nolint:errcheck // the test's leases are released
	return s, &cfg.Tasks[0]
}

// TestTriggerIDs: every listed entity when none is given; a given one the
// list lacks is refused (NotListed) unless forced; repeats are dropped; an
// id that could not be a key is refused even forced.
func TestTriggerIDs(t *testing.T) {
	t.Parallel()
	_, task := setup(t)
	ids, err := TriggerIDs(bg, *task, nil, false)
	expect.True(t, fmt.Sprintf("all: %v, %v", ids, err), err == nil && strings.Join(ids, ",") == "a,b,c")
	ids, err = TriggerIDs(bg, *task, []string{"b", "b", "a"}, false)
	expect.True(t, fmt.Sprintf("given: %v, %v", ids, err), err == nil && strings.Join(ids, ",") == "b,a")
	_, err = TriggerIDs(bg, *task, []string{"a", "zz"}, false)
	var nl *NotListed
	expect.True(t, fmt.Sprintf("unlisted: %v", err), errors.As(err, &nl) && strings.Join(nl.Missing, ",") == "zz" && strings.Contains(err.Error(), `"zz"`))
	ids, err = TriggerIDs(bg, *task, []string{"zz"}, true)
	expect.True(t, fmt.Sprintf("forced: %v, %v", ids, err), err == nil && len(ids) == 1)
	_, err = TriggerIDs(bg, *task, []string{""}, true)
	expect.True(t, "an empty id is refused", err != nil)
}

// TestTriggerSaysBusyAndRecords: a trigger enqueues one run per entity,
// says which are busy and who holds them, and records itself in the
// task's actions.
func TestTriggerSaysBusyAndRecords(t *testing.T) {
	t.Parallel()
	s, task := setup(t)
	held, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "b", TTL: time.Minute, Reason: driver.ReasonTick, Tick: time.Now().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, nil) }) //nolint:errcheck // the store stops after
	tr, err := Trigger(bg, s, task, []string{"a", "b"}, nil, "alice")
	if err != nil || tr.Recorded != nil {
		t.Fatalf("trigger: %v, recorded %v", err, tr.Recorded)
	}
	expect.True(t, "busy: "+fmt.Sprint(tr.Busy), len(tr.Busy) == 1 && tr.Busy[0].Entity == "b" && tr.Busy[0].Holder == "r1")
	expect.True(t, "said: "+tr.Said, strings.HasPrefix(tr.Said, "triggered 2 run(s) of t") && strings.Contains(tr.Said, `t "b": busy (held by r1 since`))
	as, err := s.Fleet().Actions(bg, "t", 5)
	expect.True(t, fmt.Sprintf("recorded: %+v, %v", as, err), err == nil && len(as) == 1 && as[0].What == driver.ActionTrigger && as[0].By == "alice")
}

// TestPauseAndResume: a pause is recorded with its reason and end; a
// second pause without news changes nothing; a new reason changes it and
// says so; resume lifts it, and a second resume changes nothing.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	s, task := setup(t)
	now := time.Now()
	p, err := Pause(bg, s, task, "ops", "deploy", time.Hour, now)
	expect.True(t, fmt.Sprintf("paused: %+v, %v", p, err), err == nil && p.Changed && p.Pause.Until.Equal(now.Add(time.Hour)))
	p, err = Pause(bg, s, task, "ops", "", 0, now)
	expect.True(t, "again: "+p.Said, err == nil && !p.Changed && strings.Contains(p.Said, "already paused"))
	p, err = Pause(bg, s, task, "ops", "longer deploy", 0, now)
	expect.True(t, "changed: "+p.Said, err == nil && p.Changed && p.Pause.Reason == "longer deploy" && strings.Contains(p.Said, "its pause is now"))
	_, err = Pause(bg, s, task, "ops", "", -time.Second, now)
	expect.True(t, "a negative -for is refused", err != nil)
	r, err := Resume(bg, s, task, "ops", "", now)
	expect.True(t, "resumed: "+r.Said, err == nil && r.Changed && strings.HasPrefix(r.Said, "resumed t (paused by ops"))
	pauses, _ := s.Fleet().Pauses(bg)
	expect.Equal(t, "pauses after the resume", len(pauses), 0)
	r, err = Resume(bg, s, task, "ops", "", now)
	expect.True(t, "again: "+r.Said, err == nil && !r.Changed)
	as, _ := s.Fleet().Actions(bg, "t", 10)
	expect.Equal(t, "actions recorded (pause, change, resume)", len(as), 3)
}

// TestUnlock: an unlock of a held entity revokes its lease and says how
// long until it is free; -force frees it at once and says a run may
// overlap; an entity not held is an error.
func TestUnlock(t *testing.T) {
	t.Parallel()
	s, task := setup(t)
	_, err := Unlock(bg, s, task, "a", "ops", false)
	expect.True(t, fmt.Sprintf("not held: %v", err), errors.Is(err, ErrNotHeld))
	if _, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "a", TTL: time.Minute, Reason: driver.ReasonTrigger}); err != nil {
		t.Fatal(err)
	}
	u, err := Unlock(bg, s, task, "a", "ops", false)
	expect.True(t, "revoked: "+u.Said, err == nil && !u.Freed && strings.Contains(u.Said, "t/a (holder r1"))
	u, err = Unlock(bg, s, task, "a", "ops", true)
	expect.True(t, "forced: "+u.Said, err == nil && u.Freed && strings.Contains(u.Said, "may overlap"))
}

// TestForget: a task a live replica runs is not forgotten; one only the
// registry remembers is, and the action is recorded; one nobody knows is
// an error.
func TestForget(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	_, err := Forget(bg, s, "nobody-knows", "ops", "")
	expect.True(t, fmt.Sprintf("unknown: %v", err), err != nil && strings.Contains(err.Error(), "nothing to forget"))
	if err := s.Fleet().RegisterTasks(bg, []driver.TaskInfo{{Name: "old", Schedule: "every 1h0m0s", Timezone: "UTC"}}); err != nil {
		t.Fatal(err)
	}
	d, err := Forget(bg, s, "old", "ops", "retired")
	expect.True(t, fmt.Sprintf("forgot: %+v, %v", d, err), err == nil && strings.HasPrefix(d.Said, "forgot old"))
}

// TestGroupIDs: -group G is the entities whose fair limit's fair_by
// attribute is G (of -entities, when given); a task under no fair limit,
// or a group of none, is refused with what a group is.
func TestGroupIDs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "shops.jsonl")
	if err := os.WriteFile(file, []byte(`{"id": "a", "tenant": "acme"}
{"id": "b", "tenant": "other"}
{"id": "c", "tenant": "acme"}
{"id": "d"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("t.toml", []byte(fmt.Sprintf(`
[[limits]]
name = "api"
concurrency = 2
fair_by = "tenant"

[[tasks]]
name = "fair"
every = "1m"
command = ["true"]
entities_file = %q
entities_format = "jsonl"
limits = ["api"]

[[tasks]]
name = "plain"
every = "1m"
command = ["true"]
entities = ["a"]
`, file)))
	if err != nil {
		t.Fatal(err)
	}
	fair, _ := cfg.Task("fair")
	plain, _ := cfg.Task("plain")
	for _, c := range []struct {
		task      *config.Task
		group     string
		ids       []string
		want, err string
	}{
		{fair, "acme", nil, "[a c]", ""},
		{fair, "acme", []string{"c", "b"}, "[c]", ""},
		{fair, "", nil, "[d]", ""},
		{fair, "none", nil, "", `task fair has no entity of group "none" (its attribute tenant)`},
		{plain, "acme", nil, "", "task plain is under no fair limit: a group is the value of a fair limit's fair_by attribute"},
	} {
		got, err := GroupIDs(context.Background(), cfg, *c.task, c.group, c.ids)
		if c.err != "" {
			expect.Equal(t, c.task.Name+" "+c.group+": the error", fmt.Sprint(err), c.err)
			continue
		}
		expect.Equal(t, c.task.Name+" "+c.group+": its entities", fmt.Sprint(got), c.want)
	}
}

// TestPlanBackfillInZones: with timezone_from, a backfill's ticks are each
// zone's, and each tick runs the entities of the zones that tick then:
// 09:00 in Tokyo (00:00 UTC) for a, 09:00 in the task's zone (UTC) for b,
// which names none; c, whose zone is no zone, never.
func TestPlanBackfillInZones(t *testing.T) {
	file := filepath.Join(t.TempDir(), "shops.jsonl")
	if err := os.WriteFile(file, []byte(`{"id": "a", "tz": "Asia/Tokyo"}
{"id": "b"}
{"id": "c", "tz": "Nope/Zone"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("t.toml", []byte(fmt.Sprintf("[[tasks]]\nname = \"z\"\ncron = \"0 9 * * *\"\ncommand = [\"true\"]\nentities_file = %q\nentities_format = \"jsonl\"\ntimezone_from = \"tz\"\n", file)))
	if err != nil {
		t.Fatal(err)
	}
	s := stores.Memory(lease.Options{Replica: "r1"})
	t.Cleanup(func() { s.Stop(bg) }) //nolint:errcheck // no leases
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
	plan, err := PlanBackfill(bg, s, cfg.Tasks[0], driver.Backfill{From: day, To: day.Add(48*time.Hour - time.Second), By: "op"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "ticks", plan.Ticks, 4)
	expect.Equal(t, "runs: a and b each day", plan.Runs, int64(4))
	expect.Equal(t, "from: 00:00 UTC, Tokyo's 09:00", plan.Backfill.From, day)
	expect.Equal(t, "to: 09:00 UTC the day after", plan.Backfill.To, day.Add(33*time.Hour))
}

// TestMigrateToLayout3: migrate moves a Redis of key layout 2 (0.1.0's) to
// layout 3, which keeps a tick's chunks as records, only when no replica
// runs on it: with one running it keeps layout 2 and says so.
func TestMigrateToLayout3(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Set(bg, "p:layout", "2", 0).Err())
	s, err := stores.Redis(c, "p", lease.Options{Replica: "r1"})
	must(err)
	must(s.Fleet().Announce(bg, []string{"t"}, 300*time.Millisecond))
	_, done, err := Migrate(bg, s, map[string]int{}, "op")
	must(err)
	expect.True(t, "kept, and said: "+done.Said, strings.Contains(done.Said, "key layout kept (2)"))
	expect.Equal(t, "layout", c.Get(bg, "p:layout").Val(), "2")
	expect.WaitFor(t, 5*time.Second, "the replica's announcement over", func() bool {
		rs, err := s.Fleet().Replicas(bg)
		must(err)
		return len(rs) == 0
	})
	_, done, err = Migrate(bg, s, map[string]int{}, "op")
	must(err)
	expect.Equal(t, "layout moved", c.Get(bg, "p:layout").Val(), redisdriver.LayoutVersion)
	expect.True(t, "said: "+done.Said, strings.HasPrefix(done.Said, "key layout 3: moved from 2"))
	_, done, err = Migrate(bg, s, map[string]int{}, "op")
	must(err)
	expect.True(t, "then said: "+done.Said, strings.HasPrefix(done.Said, "key layout 3: in place"))
}
