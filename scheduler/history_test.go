package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/expect"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// TestTickRecordMatchesTheRuns: each tick's record says what its runs did,
// by outcome, on one replica or two sharing Redis; the failed runs keep
// their errors, and the entity's last run its error.
func TestTickRecordMatchesTheRuns(t *testing.T) {
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		e.rec.body = func(_ context.Context, r tasks.Run) (tasks.Result, error) {
			if r.Entity == "e3" || r.Entity == "<b>7" {
				return tasks.Done, errors.New("quota exceeded for " + r.Entity)
			}
			return tasks.Done, nil
		}
		var ids []string
		for i := range 20 {
			ids = append(ids, fmt.Sprintf("%q", map[bool]string{true: "<b>7", false: fmt.Sprintf("e%d", i)}[i == 7]))
		}
		cfg := `
[[tasks]]
name = "rec"
every = "1s"
handler = "rec"
lease_ttl = "3s"
concurrency = 8
entities = [` + strings.Join(ids, ", ") + `]
`
		_, st := e.start(cfg)
		replicas := 1
		if withRedis {
			e.start(cfg)
			replicas = 2
		}
		var rs []lease.TickRecord
		expect.WaitFor(t, 10*time.Second, "two complete tick records", func() bool {
			var err error
			rs, err = st.Ticks(context.Background(), "rec", 100)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range rs {
				if r.Final() && r.Runs() > 0 && len(r.Parts) == replicas {
					n++
				}
			}
			return n >= 2
		})
		checked := 0
		for _, r := range rs {
			if !r.Final() || len(r.Parts) != replicas {
				continue
			}
			want := map[lease.Outcome]int{}
			for _, run := range e.rec.snapshot() {
				if run.Reason == lease.ReasonTick && run.Tick.Equal(r.Tick) {
					if run.err != nil {
						want[lease.OutcomeFailed]++
					} else {
						want[lease.OutcomeDone]++
					}
				}
			}
			expect.Same(t, "outcomes of "+r.Tick.String(), r.Outcomes(), want)
			expect.Equal(t, "runs of "+r.Tick.String(), r.Runs(), 20)
			expect.Equal(t, "entities of "+r.Tick.String(), r.Entities(), 20)
			expect.Same(t, "skips of "+r.Tick.String(), r.Skipped(), map[string]int{})
			expect.True(t, "a first start lag", r.FirstStart() >= 0 && r.FirstStart() <= r.LastEnd())
			checked++
		}
		expect.True(t, "ticks checked", checked >= 2)
		var fs []lease.Failure
		expect.WaitFor(t, 5*time.Second, "the failures recorded", func() bool {
			fs, _ = st.Failures(context.Background(), "rec", 10)
			return len(fs) >= 2
		})
		expect.True(t, "a failure's error", strings.HasPrefix(fs[0].Error, "quota exceeded for "))
		es, err := st.Entity(context.Background(), "rec", "<b>7")
		if err != nil {
			t.Fatal(err)
		}
		expect.Equal(t, "the entity's last error", es.Last.Error, "quota exceeded for <b>7")
	})
}

// TestStarvedAndFailingFlags: a task whose source fails is flagged
// starved, one whose runs all fail failing, after flag_after ticks.
func TestStarvedAndFailingFlags(t *testing.T) {
	e := newEnv(t, false)
	e.rec.body = func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, errors.New("down") }
	s, st := e.start(`
[defaults]
every = "1s"
handler = "rec"
flag_after = 2
[[tasks]]
name = "starves"
entities_file = "/nonexistent/tickd-test-entities"
[[tasks]]
name = "fails"
entities = ["a", "b"]
`)
	health := func(name string) Health {
		t.Helper()
		task, _ := s.Config().Task(name)
		p, err := ReadPast(context.Background(), st, task, 10)
		if err != nil {
			t.Fatal(err)
		}
		_, h := task.Assess(time.Now(), p)
		return h
	}
	expect.WaitFor(t, 10*time.Second, "starved and failing flagged", func() bool {
		return health("starves").Starved && health("fails").Failing
	})
	expect.True(t, "a failing task is not starved", !health("fails").Starved)
	expect.Equal(t, "a task that ticks is firing", health("fails").NotFiring, "")
}
