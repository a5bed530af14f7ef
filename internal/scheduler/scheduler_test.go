package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/heartbeat"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pingtest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/tasks"
)

// checkDurations fails t for every record that logged a time.Duration.
func (h *logRecords) checkDurations(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.recs {
		if r.badDuration != "" {
			t.Errorf("log line %q writes %s as a time.Duration (nanoseconds in JSON): log d.String()", r.msg, r.badDuration)
		}
	}
}

// A grant that arrives after its trust window ended (the replica was frozen
// while Redis answered) must not start the run: another replica may already
// hold the lease with a higher fence. The trust timer fires asynchronously,
// so only the synchronous check before the action prevents the start.
const lateTask = `
[[tasks]]
name = "late"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "3s"
`

func TestShutdownHandsOverAndReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		<-ctx.Done()
		return tasks.Done, context.Cause(ctx)
	}
	cfg := `
[[tasks]]
name = "long"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "3s"
entities = ["x", "y"]
`
	s, st := e.start(cfg)
	expect.WaitFor(t, 10*time.Second, "runs started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 2 })
	stopWithin(s, 200*time.Millisecond)
	if err := s.Start(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Errorf("Start after Stop: %v, want ErrShutdown", err)
	}
	var held []driver.Held
	st.Fleet().Leases(context.Background(), "", func(h driver.Held) error { held = append(held, h); return nil }) //nolint:errcheck
	if len(held) != 0 {
		t.Fatalf("leases left after shutdown: %+v", held)
	}
	var due []driver.Due
	st.Fleet().DueEntries(context.Background(), "", func(d driver.Due) error { due = append(due, d); return nil }) //nolint:errcheck
	if len(due) != 2 || due[0].Reason != driver.ReasonRetry {
		t.Fatalf("hand-over entries %+v", due)
	}
	// Another replica carries them out.
	e.rec.body = nil
	e.start(strings.Replace(cfg, `catch_up = "1h"`, "", 1))
	expect.WaitFor(t, 10*time.Second, "handed-over runs", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Reason == "retry" && !r.end.IsZero() }) == 2
	})
	if n := e.ev.count(ended(driver.OutcomeCanceled)); n != 2 {
		t.Errorf("%d interrupted runs ended as canceled, want 2", n)
	}
}

func TestReloadAddsAndRemovesTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	s, _ := e.start(`
[[tasks]]
name = "old"
every = "1s"
handler = "rec"
`)
	expect.WaitFor(t, 10*time.Second, "old runs", func() bool { return e.rec.count(func(r runRec) bool { return r.Task == "old" }) >= 1 })
	if err := s.Reload(e.config(`
[[tasks]]
name = "new"
every = "1s"
handler = "rec"
`)); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	expect.WaitFor(t, 10*time.Second, "new runs", func() bool { return e.rec.count(func(r runRec) bool { return r.Task == "new" }) >= 2 })
	if n := e.rec.count(func(r runRec) bool { return r.Task == "old" && r.start.After(reloaded.Add(100*time.Millisecond)) }); n != 0 {
		t.Fatalf("removed task ran %d times after the reload", n)
	}
	// A config naming an unregistered handler is refused; the old one stays.
	if err := s.Reload(e.config("[[tasks]]\nname = \"x\"\nevery = \"1s\"\nhandler = \"nope\"\n")); err == nil {
		t.Fatal("reload with an unknown handler accepted")
	}
	if s.Config().Tasks[0].Name != "new" {
		t.Fatal("config replaced by a bad one")
	}
}

func TestRedisDownNoRunThenRecovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.start(`
[[tasks]]
name = "down"
every = "1s"
handler = "rec"
lease_ttl = "1500ms"
entities = ["a", "b"]
`)
	expect.WaitFor(t, 10*time.Second, "runs", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 2 })
	e.srv.Stop()
	stopped := time.Now()
	// Two ticks pass while Redis is down: no run may start.
	expect.WaitFor(t, 10*time.Second, "two ticks without Redis", func() bool {
		ticks := map[time.Time]bool{}
		e.ev.count(func(ev Event) bool {
			if ev.Kind == EventStoreError && ev.Tick.After(stopped) {
				ticks[ev.Tick] = true
			}
			return false
		})
		return len(ticks) >= 2
	})
	if n := e.rec.count(func(r runRec) bool { return r.start.After(stopped) }); n != 0 {
		t.Fatalf("%d runs started without Redis", n)
	}
	failures := e.ev.count(kind(EventStoreError))
	if n := e.logs.count("cannot acquire leases; retrying", nil); n == 0 || n > 3 || n >= failures {
		t.Fatalf("acquire errors logged %d times for %d failures: want them logged, rate-limited", n, failures)
	}
	e.srv.Restart() // empty: quarantine of MaxTTL (2s), then runs resume
	back := time.Now()
	expect.WaitFor(t, 15*time.Second, "runs resume", func() bool {
		return e.rec.count(func(r runRec) bool { return r.start.After(back) }) >= 2
	})
}

func TestReloadDoesNotDisturbRunningRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	release := make(chan struct{})
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		select {
		case <-release:
			return tasks.Done, nil
		case <-ctx.Done():
			return tasks.Done, context.Cause(ctx)
		}
	}
	cfg := `
[[tasks]]
name = "steady"
every = "1h"
catch_up = "1h"
handler = "rec"
concurrency = %d
`
	s, _ := e.start(fmt.Sprintf(cfg, 1))
	expect.WaitFor(t, 10*time.Second, "run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	// Change the running task, then remove it: the run goes on untouched.
	if err := s.Reload(e.config(fmt.Sprintf(cfg, 3))); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(e.config("[[tasks]]\nname = \"other\"\nevery = \"1h\"\nhandler = \"rec\"\n")); err != nil {
		t.Fatal(err)
	}
	close(release)
	e.ev.waitFor(t, 10*time.Second, "run ended", kind(EventRunEnded))
	r := e.rec.snapshot()[0]
	if r.err != nil || r.cause != nil {
		t.Fatalf("the reload disturbed the run: err %v, cause %v", r.err, r.cause)
	}
	if n := e.ev.count(ended(driver.OutcomeDone)); n != 1 {
		t.Fatalf("%d runs ended as done, want 1", n)
	}
}

// TestFirstStartIsNotARedisError: on a Redis new to tickd nothing is
// granted for one MaxTTL (the data-loss quarantine cannot tell a new Redis
// from an emptied one). That is said once, at info, with how long; it is
// not a store error, and the tick waits it out.
func TestFirstStartIsNotARedisError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	// No InitEpoch. The quarantine starts at the store's first call (its
	// announcement, at start) and the first tick comes up to a second
	// later; a quarantine found with under a second left is not said
	// (Scheduler.quarantined). With 2s, a loaded machine found it past
	// that and the line was missing (CI): 5s leaves room for both.
	st := e.redisStore("fresh", lease.Options{Replica: "r1", MaxTTL: 5 * time.Second})
	e.run(`
[[tasks]]
name = "first"
every = "1s"
handler = "rec"
lease_ttl = "2s"
entities = ["a", "b", "c"]
`, Options{Store: st})
	expect.WaitFor(t, 15*time.Second, "runs once the quarantine is over", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 3 })
	said := e.logs.countPrefix("no tickd state in this Redis, or it restarted: a first start, a data loss, or a restart that may have loaded an older snapshot; nothing is granted for ")
	expect.Equal(t, "times the quarantine is logged", said, 1)
	expect.Equal(t, "store errors", e.ev.count(kind(EventStoreError)), 0)
	expect.Equal(t, "'cannot acquire' lines", e.logs.count("cannot acquire leases; retrying", nil), 0)
	expect.Equal(t, "ticks with errors", e.ev.count(func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.Errors > 0 }), 0)
}

// TestStoreCoversTheLongestLease: a lease store made with a MaxTTL shorter
// than a task's lease_ttl has its data-loss quarantine lengthened by New and
// by Reload, instead of quietly covering too little.
func TestStoreCoversTheLongestLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	st := stores.Memory(lease.Options{MaxTTL: time.Second})
	t.Cleanup(func() { st.Stop(context.Background()) })
	task := "[[tasks]]\nname = \"long\"\nevery = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"%s\"\n"
	s, err := New(e.config(fmt.Sprintf(task, "5m")), Options{Store: st, Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "MaxTTL after New", st.MaxTTL(), 5*time.Minute)
	if err := s.Reload(e.config(fmt.Sprintf(task, "10m"))); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "MaxTTL after a reload with a longer lease", st.MaxTTL(), 10*time.Minute)
}

// TestShutdownWithRedisDownKeepsItsTimeout: a run that asks for a
// reschedule while Redis is down leaves a request that cannot be stored;
// SIGTERM's shutdown still ends within shutdown_timeout and a few seconds
// (the release's own bound), not after the request's retries, and says
// what it could not store.
func TestShutdownWithRedisDownKeepsItsTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	finish, s, _ := e.startOneRun("more", tasks.Reschedule)
	e.srv.Stop()
	close(finish) // ends asking for a reschedule that Redis cannot take
	const timeout = 500 * time.Millisecond
	stopped := make(chan struct{})
	start := time.Now()
	go func() { stopWithin(s, timeout); close(stopped) }()
	bound := timeout + lease.ReleaseTimeout + 3*time.Second
	select {
	case <-stopped:
	case <-time.After(bound):
		t.Fatalf("shutdown still going after %v (shutdown_timeout %v)", bound, timeout)
	}
	t.Logf("shutdown took %v", time.Since(start).Round(time.Millisecond))
	if n := e.logs.countPrefix("follow-up request lost"); n != 1 {
		t.Fatalf("%d lines saying the reschedule was not stored, want 1:\n%v", n, e.logs)
	}
}

// stallingDriver holds every Acquire after the first few until its
// context ends, as a Redis that stops answering while tickd stops.
type stallingDriver struct {
	driver.Driver
	free    atomic.Int32 // acquires answered before the stall
	stalled chan struct{}
	once    sync.Once
}

func (d *stallingDriver) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	if d.free.Add(-1) >= 0 {
		return d.Driver.Acquire(ctx, reqs)
	}
	d.once.Do(func() { close(d.stalled) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// startOn starts a scheduler of replica r1 on cfg, its store on driver d.
func (e *env) startOn(d driver.Driver, cfg string) *Scheduler {
	t := e.t
	st := lease.New(d, lease.Options{Replica: "r1"})
	t.Cleanup(func() { st.Stop(context.Background()) })
	opts := Options{Store: st, Logger: slog.New(e.logs), Registry: e.reg, Observer: e.ev.add}
	s, err := New(e.config(cfg), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// endsDriver keeps the end of each run it releases, by entity.
type endsDriver struct {
	driver.Driver
	mu   sync.Mutex
	ends map[string]time.Time
}

func (d *endsDriver) Release(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	d.mu.Lock()
	for _, r := range rs {
		d.ends[r.Lease.Entity] = r.Finished.Ended
	}
	d.mu.Unlock()
	return d.Driver.Release(ctx, rs)
}

// TestRunEndedLineIsTimedAtTheEnd: the "run ended" line, written once the
// release is done, carries the time the run ended, the one its record in
// the store has, not a reading of its own.
func TestRunEndedLineIsTimedAtTheEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	d := &endsDriver{Driver: memdriver.New(), ends: map[string]time.Time{}}
	s := e.startOn(d, "[[tasks]]\nname = \"timed\"\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nentities = [\"a\"]\n")
	e.ev.waitFor(t, 10*time.Second, "run ended", kind(EventRunEnded))
	stopWithin(s, 5*time.Second)
	var lines []time.Time
	for _, r := range e.logs.all() {
		if r.msg == "run ended" {
			lines = append(lines, r.time)
		}
	}
	d.mu.Lock()
	end := d.ends["a"]
	d.mu.Unlock()
	if len(lines) != 1 || !lines[0].Equal(end) {
		t.Fatalf("run ended lines at %v, want one at the run's end %v", lines, end)
	}
}

// TestStopDuringAnAcquireIsNoRedisError: a stop that cuts short a batch's
// acquire is a stop, not a Redis failure: nothing is logged at ERROR and no
// store error is reported (CI saw "cannot acquire leases; retrying:
// context canceled" in a clean stop).
func TestStopDuringAnAcquireIsNoRedisError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	d := &stallingDriver{Driver: memdriver.New(), stalled: make(chan struct{})}
	d.free.Store(1)
	s := e.startOn(d, "[[tasks]]\nname = \"cut\"\nevery = \"1s\"\nhandler = \"rec\"\nentities = [\"a\", \"b\"]\n")
	select {
	case <-d.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("no second acquire")
	}
	stopWithin(s, 5*time.Second)
	expect.Equal(t, "store errors", e.ev.count(kind(EventStoreError)), 0)
	expect.Equal(t, "'cannot acquire' lines", e.logs.count("cannot acquire leases; retrying", nil), 0)
}

// TestReloadFinishesTheTickUnderWay: a reload in the middle of a tick's
// fan-out (two replicas on one Redis) that changes the task's
// concurrency, schedule, timeout, lease, limits or shards does not stop
// that fan-out: every entity of the tick runs once, and no replica's tick
// says it stopped. A reload that removes the task stops it, and its tick
// says so (removed), not "stopped".
func TestReloadFinishesTheTickUnderWay(t *testing.T) {
	t.Parallel()
	const n = 40
	base := `
[[limits]]
name = "api"
concurrency = 3

[[tasks]]
name = "fan"
every = "%s"
heartbeat_url = "%s/fan"
handler = "rec"
lease_ttl = "%s"
timeout = "%s"
concurrency = %d
shards = %d
limits = %s
entities = ` + entities(n) + "\n"
	type task struct {
		every, ttl, timeout string
		concurrency, shards int
		limits              string
	}
	cfg := func(c task, monitor string) string {
		return fmt.Sprintf(base, c.every, monitor, c.ttl, c.timeout, c.concurrency, c.shards, c.limits)
	}
	old := task{"5s", "10s", "1m", 4, 1, "[]"}
	for name, change := range map[string]func(*task){
		"concurrency": func(c *task) { c.concurrency = 3 },
		"schedule":    func(c *task) { c.every = "7s" },
		"timeout":     func(c *task) { c.timeout = "2m" },
		"lease_ttl":   func(c *task) { c.ttl = "12s" },
		// Its schedule too: under the limit (3 at once) the tick's runs
		// wait, and a newer tick's run supersedes an older one waiting
		// still (by design, recorded); a loaded machine had 10 of 40
		// superseded by the tick 5s later.
		"limits": func(c *task) { c.limits, c.every = `["api"]`, "1m" },
		"shards": func(c *task) { c.shards = 4 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, true)
			e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
				select { // the work: 150ms, so that the fan-out lasts about a second
				case <-time.After(150 * time.Millisecond):
					return tasks.Done, nil
				case <-ctx.Done():
					return tasks.Done, context.Cause(ctx)
				}
			}
			m := pingtest.Start(t) // the heartbeats: the tick's end must be a success
			s1, st1 := e.start(cfg(old, m.URL))
			s2, _ := e.start(cfg(old, m.URL))
			var T time.Time
			expect.WaitFor(t, 15*time.Second, "a tick's runs under way", func() bool {
				runs := e.rec.snapshot()
				if len(runs) < 6 {
					return false
				}
				T = runs[0].Tick
				return true
			})
			nc := old
			change(&nc)
			for _, s := range []*Scheduler{s1, s2} {
				if err := s.Reload(e.config(cfg(nc, m.URL))); err != nil {
					t.Fatal(err)
				}
			}
			checkTickDelivered(t, e, m, st1, T, n)
		})
	}
	t.Run("removed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false)
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			<-ctx.Done() // a run holds its slot until the scheduler stops
			return tasks.Done, nil
		}
		s, _ := e.start(cfg(old, pingtest.Start(t).URL))
		expect.WaitFor(t, 15*time.Second, "the tick's first runs", func() bool { return e.rec.count(func(runRec) bool { return true }) == old.concurrency })
		if err := s.Reload(e.config("[[tasks]]\nname = \"other\"\nevery = \"1h\"\nhandler = \"rec\"\n")); err != nil {
			t.Fatal(err)
		}
		e.ev.waitFor(t, 10*time.Second, "the fan-out ended", kind(EventTick))
		c := e.ev.events(kind(EventTick))[0].Counts
		expect.True(t, fmt.Sprintf("the tick says the task was removed, not that it stopped: %+v", c), c.Removed && !c.Stopped)
	})
}

// checkTickDelivered: every entity of tick T (n of them) of task "fan" ran
// once and did not fail, no run overlapped another, both replicas' fan-outs
// of T ended without stopping, and the monitor heard T end in success.
func checkTickDelivered(t *testing.T, e *env, m *pingtest.Monitor, st *lease.Store, T time.Time, n int) {
	t.Helper()
	ofT := func(r runRec) bool { return r.Tick.Equal(T) && !r.end.IsZero() }
	expect.WaitFor(t, time.Minute, "every entity of the tick ran", func() bool { return e.rec.count(ofT) >= n })
	ran := map[string]int{}
	for _, r := range e.rec.snapshot() {
		if r.Tick.Equal(T) {
			ran[r.Entity]++
			if r.err != nil {
				t.Errorf("%s's run of the tick failed: %v", r.Entity, r.err)
			}
		}
	}
	for i := range n {
		expect.Equal(t, fmt.Sprint("runs of e", i, " in the tick"), ran[fmt.Sprint("e", i)], 1)
	}
	expect.Equal(t, "overlapping runs", e.rec.overlaps, 0)
	tickT := func(ev Event) bool { return ev.Kind == EventTick && ev.Tick.Equal(T) }
	expect.WaitFor(t, 30*time.Second, "both replicas' fan-outs of the tick ended", func() bool { return e.ev.count(tickT) == 2 })
	for _, ev := range e.ev.events(tickT) {
		if ev.Counts.Stopped || ev.Counts.Removed {
			t.Errorf("%s's fan-out of the tick stopped: %+v", ev.Replica, ev.Counts)
		}
	}
	rid := heartbeat.RID("fan", T)
	var end pingtest.Ping
	heard := func() bool {
		for _, r := range m.Runs() {
			if r.RID == rid && len(r.Ends) > 0 {
				end = r.Ends[0]
				return true
			}
		}
		return false
	}
	if !expect.Within(20*time.Second, heard) {
		recs, _ := st.Fleet().Ticks(context.Background(), "fan", 5)
		for _, r := range recs {
			t.Logf("record %s: final %v, waiting %d, parts %+v", r.Tick.Format(time.TimeOnly), r.Final(), r.Waiting(), r.Parts)
		}
		t.Fatal("the tick's heartbeat end did not come within 20s")
	}
	expect.Equal(t, "the tick's heartbeat end, "+end.Body, end.Kind, "success")
}
