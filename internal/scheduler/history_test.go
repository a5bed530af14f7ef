package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/faultproxy"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// TestTickRecordMatchesTheRuns: each tick's record says what its runs did,
// by outcome, on one replica or two sharing Redis; the failed runs keep
// their errors, and the entity's last run its error.
func TestTickRecordMatchesTheRuns(t *testing.T) {
	t.Parallel()
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
		var rs []driver.TickRecord
		expect.WaitFor(t, 10*time.Second, "two complete tick records", func() bool {
			var err error
			rs, err = st.Fleet().Ticks(context.Background(), "rec", 100)
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
			want := map[driver.Outcome]int{}
			for _, run := range e.rec.snapshot() {
				if run.Reason == driver.ReasonTick && run.Tick.Equal(r.Tick) {
					if run.err != nil {
						want[driver.OutcomeFailed]++
					} else {
						want[driver.OutcomeDone]++
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
		var fs []driver.Failure
		expect.WaitFor(t, 5*time.Second, "the failures recorded", func() bool {
			fs, _ = st.Fleet().Failures(context.Background(), "rec", 10)
			return len(fs) >= 2
		})
		expect.True(t, "a failure's error", strings.HasPrefix(fs[0].Error, "quota exceeded for "))
		es, err := st.Fleet().Entity(context.Background(), "rec", "<b>7")
		if err != nil {
			t.Fatal(err)
		}
		expect.Equal(t, "the entity's last error", es.Last.Error, "quota exceeded for <b>7")
	})
}

// TestStarvedAndFailingFlags: a task whose source fails is flagged
// starved, one whose runs all fail failing, after flag_after ticks.
func TestStarvedAndFailingFlags(t *testing.T) {
	t.Parallel()
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
	health := func(name string) history.Health {
		t.Helper()
		task, _ := s.Config().Task(name)
		p, err := history.ReadPast(context.Background(), st, task, 10)
		if err != nil {
			t.Fatal(err)
		}
		_, h := history.Assess(task, time.Now(), p)
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
	t.Parallel()
	e := newEnv(t, true)
	proxy := faultproxy.Start(t, e.srv.Addr)
	st := e.redisStoreVia(redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second}, "tickd", lease.Options{Replica: "r1", MaxTTL: 2 * time.Second})
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
	complete := func() map[time.Time]driver.TickRecord {
		rs, err := direct.Fleet().Ticks(context.Background(), "rec", 100)
		if err != nil {
			t.Fatal(err)
		}
		m := map[time.Time]driver.TickRecord{}
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
			if r.Reason == driver.ReasonTick && !r.end.IsZero() && r.Tick.Before(resumed) {
				byTick[r.Tick.UTC()]++
			}
		}
		for tick, n := range byTick {
			if got[tick].Outcomes()[driver.OutcomeDone] != n {
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
	t.Parallel()
	e := newEnv(t, true)
	admin := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	t.Cleanup(func() { admin.Close() })
	// Every key tickd uses but the history's (TASK:ticks, TASK:failures).
	err := admin.Do(context.Background(), "ACL", "SETUSER", "nohistory", "on", ">pw", "+@all", "~*:entities", "~*:followups",
		"~*:request:*", "~*:claims:*", "~*:fan:*", "~*:epoch", "~*:due", "~*:dueinfo", "~tickd:paused", "~tickd:pauses", "~tickd:replicas", "~tickd:sweep", "~tickd:layout", "~tickd:ackprobe", "~*:shards", "-@dangerous", "+info").Err()
	if err != nil {
		t.Fatal(err)
	}
	st := e.redisStoreVia(redis.Options{Username: "nohistory", Password: "pw"}, "tickd", lease.Options{Replica: "r1", MaxTTL: 2 * time.Second})
	if err := st.Fleet().RecordTicks(context.Background(), []driver.TickWrite{{Task: "rec", Tick: time.Now(),
		Part: driver.TickPart{Replica: "x", Written: time.Now()}, Keep: driver.DefaultHistory()}}); err == nil {
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
		rs, err := st.Fleet().Ticks(context.Background(), "rec", 100)
		if err != nil {
			t.Fatal(err)
		}
		failed := map[time.Time]int{}
		for _, r := range rs {
			failed[r.Tick.UTC()] = r.Outcomes()[driver.OutcomeFailed]
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
	expect.WaitFor(t, 10*time.Second, "the refused failures written", func() bool {
		fs, err := st.Fleet().Failures(context.Background(), "rec", 100)
		return err == nil && len(fs) >= 15
	})
}

// healthSeen is a Metrics that keeps the last health each task was
// reported with.
type healthSeen struct {
	noMetrics
	mu   sync.Mutex
	last map[string]history.Health
	runs map[string]map[driver.Outcome]int // the last complete tick's
}

func (m *healthSeen) Health(task string, views []history.TickView, h history.Health) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last[task] = h
	for _, v := range views {
		if v.State == history.TickComplete {
			m.runs[task] = v.Outcomes()
			break
		}
	}
}

func (m *healthSeen) get(task string) (history.Health, map[driver.Outcome]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[task], m.runs[task]
}

// TestHealthMetrics: the flags and the last complete tick's outcomes reach
// the metrics, for a task every replica runs and for one none does.
func TestHealthMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	m := &healthSeen{last: map[string]history.Health{}, runs: map[string]map[driver.Outcome]int{}}
	e.rec.body = func(_ context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Entity == "b" {
			return tasks.Done, errors.New("down")
		}
		return tasks.Done, nil
	}
	e.run(`
[defaults]
handler = "rec"
flag_after = 1
[[tasks]]
name = "rec"
every = "1s"
entities = ["a", "b"]
[[tasks]]
name = "starves"
every = "1s"
entities_file = "/nonexistent/tickd-test-entities"
`, Options{Store: e.store("r1"), DuePoll: 20 * time.Millisecond, PausePoll: 100 * time.Millisecond, Metrics: m, HealthPoll: 100 * time.Millisecond})
	expect.WaitFor(t, 10*time.Second, "the last tick's outcomes and the starved flag", func() bool {
		_, runs := m.get("rec")
		starves, _ := m.get("starves")
		return runs[driver.OutcomeDone] == 1 && runs[driver.OutcomeFailed] == 1 && starves.Starved
	})
	rec, _ := m.get("rec")
	expect.Equal(t, "a ticking task is firing", rec.NotFiring, "")
	expect.Equal(t, "half failing is not failing", rec.Failing, false)
}

// TestAssessMissedAndNotFiring: the ticks the schedule expected between
// records are missed, unless the task was paused then; a task whose runner
// is up and whose expected tick has no record a grace later is not firing.
func TestAssessMissedAndNotFiring(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("t.toml", []byte(`
[[tasks]]
name = "t"
every = "1m"
handler = "h"
`))
	if err != nil {
		t.Fatal(err)
	}
	task := &cfg.Tasks[0]
	now := time.Date(2026, 11, 24, 12, 0, 30, 0, time.UTC)
	at := func(min int) time.Time { return now.Truncate(time.Minute).Add(time.Duration(min) * time.Minute) }
	rec := func(min int) driver.TickRecord {
		return driver.TickRecord{Tick: at(min), Parts: []driver.TickPart{{Replica: "r", Final: true, Started: 1,
			Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 1}, FirstStart: -1, LastEnd: -1}}}
	}
	runner := []driver.Replica{{ID: "r", Tasks: []string{"t"}, Since: at(-60)}}
	p := history.Past{Ticks: []driver.TickRecord{rec(-8), rec(-10)}, Replicas: runner}
	views, h := history.Assess(task, now, p)
	var states []string
	for _, v := range views {
		states = append(states, v.Tick.Format("15:04")+" "+v.State)
	}
	// Due up to now − (10s + 1m): 11:59:20, so 11:53…11:59 are missed.
	want := []string{"11:59 missed", "11:58 missed", "11:57 missed", "11:56 missed", "11:55 missed", "11:54 missed",
		"11:53 missed", "11:52 complete", "11:51 missed", "11:50 complete"}
	expect.Same(t, "ticks", states, want)
	expect.True(t, "not firing: "+h.NotFiring, strings.Contains(h.NotFiring, "no record of the tick at 2026-11-24T11:53:00Z"))

	// Paused from 11:50:30 to 11:51:30: 11:51 was not missed but paused,
	// by whom and why; paused from 11:53:30 on, the ticks since are one
	// paused row.
	p.Actions = []driver.Action{{What: "pause", At: at(-7).Add(30 * time.Second), By: "bob", Reason: "deploy"},
		{What: "resume", At: at(-9).Add(30 * time.Second)}, {What: "pause", At: at(-10).Add(30 * time.Second), By: "alice", Reason: "db"}}
	views, _ = history.Assess(task, now, p)
	states = nil
	for _, v := range views {
		s := v.Tick.Format("15:04") + " " + v.State
		if v.Pause != nil {
			s += " by " + v.Pause.By + ": " + v.Pause.Reason
		}
		states = append(states, s)
	}
	expect.Same(t, "ticks with pauses", states, []string{"11:54 paused by bob: deploy", "11:53 missed", "11:52 complete",
		"11:51 paused by alice: db", "11:50 complete"})
	p.Actions = nil

	// A tick is missed as soon as a later one is due, whatever catch_up
	// allows: with catch_up 10m, 11:59 is missed at 12:00:30.
	late := *task
	late.CatchUp = 10 * time.Minute
	views, _ = history.Assess(&late, now, history.Past{Ticks: []driver.TickRecord{rec(-8)}, Replicas: runner})
	expect.Equal(t, "the newest tick before the latest due one", views[0].Tick.Format("15:04")+" "+views[0].State, "11:59 missed")
	// The runner started after the newest record: the first tick after its
	// start is the one due.
	p.Replicas = []driver.Replica{{ID: "r", Tasks: []string{"t"}, Since: at(0).Add(-20 * time.Second)}}
	if _, h := history.Assess(task, now, p); h.NotFiring != "" {
		t.Errorf("a runner that started 20s ago is not yet late: %s", h.NotFiring)
	}
	p.Paused = true
	p.Replicas = nil
	if _, h := history.Assess(task, now, p); h.NotFiring != "" {
		t.Errorf("a paused task is not flagged: %s", h.NotFiring)
	}
}

// TestFailureSaysWhyItStopped: a Go handler stopped by its timeout returns
// "context canceled"; its failure says it timed out.
func TestFailureSaysWhyItStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, _ tasks.Run) (tasks.Result, error) {
		<-ctx.Done()
		return tasks.Done, ctx.Err()
	}
	_, st := e.start(`
[[tasks]]
name = "rec"
every = "1h"
catch_up = "1h"
handler = "rec"
timeout = "100ms"
entities = ["slow"]
`)
	var fs []driver.Failure
	expect.WaitFor(t, 10*time.Second, "the timeout recorded", func() bool {
		fs, _ = st.Fleet().Failures(context.Background(), "rec", 10)
		return len(fs) > 0
	})
	expect.Equal(t, "outcome", fs[0].Outcome, driver.OutcomeTimeout)
	expect.Equal(t, "error", fs[0].Error, "context canceled ("+ErrTimeout.Error()+")")
}

// TestHistoryRewrittenAfterADataLoss: Redis loses its data (FLUSHALL, as a
// restart without persistence would); the records of the ticks just before
// come back, written again by the replica that ran them.
func TestHistoryRewrittenAfterADataLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	_, st := e.start(`
[[tasks]]
name = "rec"
every = "1s"
handler = "rec"
lease_ttl = "2s"
entities = ["a", "b"]
`)
	var before driver.TickRecord
	expect.WaitFor(t, 10*time.Second, "a complete record", func() bool {
		rs, _ := st.Fleet().Ticks(context.Background(), "rec", 10)
		for _, r := range rs {
			if r.Final() && r.Runs() == 2 {
				before = r
				return true
			}
		}
		return false
	})
	admin := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	t.Cleanup(func() { admin.Close() })
	if err := admin.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 15*time.Second, "the record of a tick before the loss written again", func() bool {
		rs, _ := st.Fleet().Ticks(context.Background(), "rec", 100)
		for _, r := range rs {
			if r.Tick.Equal(before.Tick) {
				return r.Final() && r.Runs() == 2
			}
		}
		return false
	})
}

// TestTickFannedOutTwiceCountsOnce: a reload fans a tick out again in the
// same process (the task's state is new); both fan-outs count in the
// process's one part of the tick. Before, the second part replaced the
// first, and the record lost the first fan-out's runs (the nemesis's
// reload: 159 runs recorded of 161).
func TestTickFannedOutTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	s, st := e.start(`
[[tasks]]
name = "twice"
every = "1h"
handler = "rec"
entities = ["a"]
`)
	task := s.Config().Tasks[0]
	T := time.Now().Truncate(time.Second)
	ctx := context.Background()
	first := s.history.begin(ctx, task, T, "")
	second := s.history.begin(ctx, task, T, "") // after a reload, before the first fan-out ended
	s.history.fannedOut(first, TickCounts{Entities: 10, Started: 6, AlreadyRan: 4})
	s.history.fannedOut(second, TickCounts{Entities: 10, Started: 3, AlreadyRan: 7})
	expect.WaitFor(t, 10*time.Second, "the tick's final record", func() bool {
		rs, err := st.Fleet().Ticks(ctx, "twice", 10)
		return err == nil && len(rs) > 0 && rs[0].Tick.Equal(T) && rs[0].Final() && rs[0].Runs() == 9
	})
	rs, _ := st.Fleet().Ticks(ctx, "twice", 10)
	expect.Equal(t, "parts of the one process", len(rs[0].Parts), 1)
	expect.Equal(t, "already ran: the 7 of the second fan-out less the 6 the first ran", rs[0].Skipped()[driver.SkipAlreadyRan], 1)
}

// TestTickCountsWhileItFansOut: while a tick fans out (its runs hold every
// run slot, so the fan-out waits), its record says the counts so far, not
// "0 entities, 0 runs": they are written within about liveEvery. Before,
// a part's counts were written only when its fan-out ended.
func TestTickCountsWhileItFansOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	release := make(chan struct{})
	e.rec.body = func(ctx context.Context, _ tasks.Run) (tasks.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return tasks.Done, nil
	}
	defer close(release)
	_, st := e.start(`
[[tasks]]
name = "slow"
every = "1h"
catch_up = "1h"
handler = "rec"
concurrency = 2
entities = ["a", "b", "c", "d", "e", "f"]
`)
	ctx := context.Background()
	expect.WaitFor(t, 10*time.Second, "the fan-out's counts so far in its record", func() bool {
		rs, err := st.Fleet().Ticks(ctx, "slow", 1)
		return err == nil && len(rs) == 1 && !rs[0].Final() && rs[0].Runs() == 2 && rs[0].Entities() >= 2
	})
}
