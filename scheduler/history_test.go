package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/expect"
	"github.com/tickd/tickd/internal/faultproxy"
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

// TestHistoryCatchesUpAfterAStall: the link to Redis stalls for longer than
// a history write's timeout; the ticks of that time still get their
// records, matching their runs, once it answers again.
func TestHistoryCatchesUpAfterAStall(t *testing.T) {
	e := newEnv(t, true)
	proxy := faultproxy.Start(t, e.srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	st, err := lease.NewRedis(c, "tickd", lease.Options{Replica: "r1", MaxTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.InitEpoch(context.Background()) //nolint:errcheck
	e.run(`
[[tasks]]
name = "rec"
every = "1s"
handler = "rec"
lease_ttl = "20s"
catch_up = "30s"
entities = ["a", "b", "c"]
`, Options{Store: st, DuePoll: 20 * time.Millisecond, PausePoll: 100 * time.Millisecond})
	direct := e.redisStore("tickd", lease.Options{Replica: "reader"})
	complete := func() map[time.Time]lease.TickRecord {
		rs, err := direct.Ticks(context.Background(), "rec", 100)
		if err != nil {
			t.Fatal(err)
		}
		m := map[time.Time]lease.TickRecord{}
		for _, r := range rs {
			if r.Final() {
				m[r.Tick.UTC()] = r
			}
		}
		return m
	}
	expect.WaitFor(t, 10*time.Second, "a complete record", func() bool { return len(complete()) > 0 })
	proxy.Stall()
	stalled := time.Now()
	expect.WaitFor(t, 20*time.Second, "the stall outlasting a history write", func() bool { return time.Since(stalled) > 6*time.Second })
	proxy.Resume()
	resumed := time.Now()
	expect.WaitFor(t, 30*time.Second, "a record for every tick that ran, matching its runs", func() bool {
		got := complete()
		byTick := map[time.Time]int{}
		for _, r := range e.rec.snapshot() {
			if r.Reason == lease.ReasonTick && !r.end.IsZero() && r.Tick.Before(resumed) {
				byTick[r.Tick.UTC()]++
			}
		}
		for tick, n := range byTick {
			if got[tick].Outcomes()[lease.OutcomeDone] != n {
				return false
			}
		}
		return len(byTick) > 0
	})
}

// TestRunsGoOnWhenHistoryWritesFail: a Redis user that may touch the
// leases but not the history's keys: every history write fails, and the
// ticks run as before. Once the user may, the records of those ticks are
// written: what failed was kept.
func TestRunsGoOnWhenHistoryWritesFail(t *testing.T) {
	e := newEnv(t, true)
	admin := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	t.Cleanup(func() { admin.Close() })
	// Every key tickd uses but the history's (TASK:ticks, TASK:failures).
	err := admin.Do(context.Background(), "ACL", "SETUSER", "nohistory", "on", ">pw", "+@all", "~*:entities", "~*:followups",
		"~*:request:*", "~*:claims:*", "~*:epoch", "~*:due", "~*:dueinfo", "~tickd:paused", "~tickd:pauses", "~tickd:replicas", "~tickd:sweep", "~tickd:layout", "~tickd:ackprobe", "-@dangerous", "+info").Err()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr, Username: "nohistory", Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st, err := lease.NewRedis(c, "tickd", lease.Options{Replica: "r1", MaxTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.RecordTicks(context.Background(), []lease.TickWrite{{Task: "rec", Tick: time.Now(),
		Part: lease.TickPart{Replica: "x", Written: time.Now()}, Keep: lease.DefaultRetention}}); err == nil {
		t.Fatal("the user may write the history: the test tests nothing")
	}
	st.InitEpoch(context.Background()) //nolint:errcheck
	e.rec.body = func(context.Context, tasks.Run) (tasks.Result, error) {
		return tasks.Done, errors.New("fails, for the history")
	}
	e.run(`
[[tasks]]
name = "rec"
every = "1s"
handler = "rec"
lease_ttl = "3s"
entities = ["a", "b", "c"]
`, Options{Store: st, DuePoll: 20 * time.Millisecond, PausePoll: 100 * time.Millisecond})
	expect.WaitFor(t, 15*time.Second, "five ticks run in full, history refused", func() bool {
		ticks := map[time.Time]int{}
		for _, r := range e.rec.snapshot() {
			if !r.end.IsZero() {
				ticks[r.Tick]++
			}
		}
		full := 0
		for _, n := range ticks {
			if n == 3 {
				full++
			}
		}
		return full >= 5 && e.ev.count(func(ev Event) bool { return ev.Kind == EventStoreError }) > 0
	})
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "nohistory", "allkeys").Err(); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	expect.WaitFor(t, 30*time.Second, "the refused ticks' records written", func() bool {
		rs, err := st.Ticks(context.Background(), "rec", 100)
		if err != nil {
			t.Fatal(err)
		}
		failed := map[time.Time]int{}
		for _, r := range rs {
			failed[r.Tick.UTC()] = r.Outcomes()[lease.OutcomeFailed]
		}
		n := 0
		for _, r := range e.rec.snapshot() {
			if !r.end.IsZero() && r.end.Before(granted.Add(-2*time.Second)) && failed[r.Tick.UTC()] != 3 {
				return false
			}
			n++
		}
		return n > 0
	})
	fs, err := st.Failures(context.Background(), "rec", 100)
	expect.True(t, "the refused failures written", err == nil && len(fs) >= 15)
}
