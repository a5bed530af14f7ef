package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/expect"
	"github.com/tickd/tickd/internal/redistest"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// recorder is a Go handler that records every run and detects overlaps of
// one entity's runs, across all schedulers of a test.
type recorder struct {
	mu       sync.Mutex
	runs     []runRec
	active   map[string]int
	overlaps int
	// body, if set, is what a run does (after being recorded as started).
	body func(ctx context.Context, r tasks.Run) (tasks.Result, error)
}

type runRec struct {
	tasks.Run
	start, end time.Time
	err        error
	cause      error
}

func newRecorder() *recorder { return &recorder{active: map[string]int{}} }

func (rc *recorder) handler(ctx context.Context, r tasks.Run) (tasks.Result, error) {
	rc.mu.Lock()
	rc.active[r.Entity]++
	if rc.active[r.Entity] > 1 {
		rc.overlaps++
	}
	i := len(rc.runs)
	rc.runs = append(rc.runs, runRec{Run: r, start: time.Now()})
	body := rc.body
	rc.mu.Unlock()
	res, err := tasks.Done, error(nil)
	if body != nil {
		res, err = body(ctx, r)
	}
	rc.mu.Lock()
	rc.active[r.Entity]--
	rc.runs[i].end, rc.runs[i].err, rc.runs[i].cause = time.Now(), err, context.Cause(ctx)
	rc.mu.Unlock()
	return res, err
}

func (rc *recorder) snapshot() []runRec {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]runRec(nil), rc.runs...)
}

func (rc *recorder) count(pred func(runRec) bool) int {
	n := 0
	for _, r := range rc.snapshot() {
		if pred(r) {
			n++
		}
	}
	return n
}

// events collects what the schedulers of a test report (Options.Observer):
// tests wait on these, not on log text.
type events struct {
	mu   sync.Mutex
	list []Event
}

func (ev *events) add(e Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.list = append(ev.list, e)
}

func (ev *events) count(pred func(Event) bool) int { return len(ev.events(pred)) }

// events returns the events that match pred.
func (ev *events) events(pred func(Event) bool) []Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []Event
	for _, e := range ev.list {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits until an event matches pred.
func (ev *events) waitFor(t *testing.T, d time.Duration, what string, pred func(Event) bool) {
	t.Helper()
	redistest.WaitFor(t, d, what, func() bool { return ev.count(pred) > 0 })
}

func kind(k EventKind) func(Event) bool { return func(e Event) bool { return e.Kind == k } }

func ended(outcome lease.Outcome) func(Event) bool {
	return func(e Event) bool { return e.Kind == EventRunEnded && e.Outcome == outcome }
}

// logRecords is a slog.Handler that keeps each record's message and
// attributes (the logger's own included), for tests of what the logs say:
// the log lines are an interface (docs/operations.md, "Logs").
type logRecords struct {
	mu    *sync.Mutex
	recs  *[]logRec
	attrs []slog.Attr
}

type logRec struct {
	level       slog.Level
	msg         string
	attrs       map[string]string
	badDuration string // an attribute logged as a time.Duration
}

func newLogRecords() *logRecords { return &logRecords{mu: &sync.Mutex{}, recs: &[]logRec{}} }

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		if v := a.Value.Resolve(); v.Kind() == slog.KindDuration {
			// slog's JSON handler writes a duration as nanoseconds; tickd's
			// lines write them as Go does ("5s"), as a run's duration is.
			rec.badDuration = a.Key
		}
		rec.attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, rec)
	return nil
}

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

func (h *logRecords) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecords{mu: h.mu, recs: h.recs, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *logRecords) WithGroup(string) slog.Handler { return h }

// count is the number of records with message msg (any message for "")
// whose attributes include want.
// countPrefix counts the records whose message begins with prefix.
func (h *logRecords) countPrefix(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range *h.recs {
		if strings.HasPrefix(r.msg, prefix) {
			n++
		}
	}
	return n
}

func (h *logRecords) count(msg string, want map[string]string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
next:
	for _, r := range *h.recs {
		if msg != "" && r.msg != msg {
			continue
		}
		for k, v := range want {
			if r.attrs[k] != v {
				continue next
			}
		}
		n++
	}
	return n
}

func (h *logRecords) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range *h.recs {
		fmt.Fprintf(&b, "%v %q %v\n", r.level, r.msg, r.attrs)
	}
	return b.String()
}

type env struct {
	t     *testing.T
	srv   *redistest.Server // nil for the in-process store
	mem   *lease.Store
	logs  *logRecords
	ev    *events
	reg   *tasks.Registry
	rec   *recorder
	count int
}

func newEnv(t *testing.T, withRedis bool) *env {
	e := &env{t: t, logs: newLogRecords(), ev: &events{}, reg: &tasks.Registry{}, rec: newRecorder()}
	t.Cleanup(func() { e.logs.checkDurations(t) }) // after the schedulers' own cleanups: registered first
	if withRedis {
		e.srv = redistest.Start(t)
	}
	if err := e.reg.Register("rec", e.rec.handler); err != nil {
		t.Fatal(err)
	}
	return e
}

// store returns a new store: a new Redis client (another replica), or the
// one in-process store.
func (e *env) store(replica string) *lease.Store {
	t := e.t
	if e.srv == nil {
		if e.mem == nil {
			e.mem = lease.NewMemory(lease.Options{Replica: replica})
			t.Cleanup(func() { e.mem.Close() })
		}
		return e.mem
	}
	s := e.redisStore("tickd", lease.Options{Replica: replica, MaxTTL: 2 * time.Second})
	s.InitEpoch(context.Background()) //nolint:errcheck
	return s
}

// redisStore returns a store on the test's Redis under prefix, closed when
// the test ends. Its epoch is not initialised: a Redis new to tickd.
func (e *env) redisStore(prefix string, opts lease.Options) *lease.Store {
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	s, err := lease.NewRedis(c, prefix, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close(); c.Close() })
	return s
}

func (e *env) config(toml string) *Config {
	e.t.Helper()
	cfg, err := ParseConfig("test.toml", []byte(toml))
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// start runs a scheduler (a replica) for cfg until the test ends.
func (e *env) start(toml string) (*Scheduler, *lease.Store) {
	e.t.Helper()
	e.count++
	replica := fmt.Sprintf("r%d", e.count)
	st := e.store(replica)
	return e.run(toml, Options{Store: st, DuePoll: 20 * time.Millisecond, PausePoll: 100 * time.Millisecond}), st
}

// run starts a scheduler for toml with opts, logging to the test's records
// and reporting to its events, until the test ends.
func (e *env) run(toml string, opts Options) *Scheduler {
	e.t.Helper()
	opts.Logger, opts.Registry, opts.Observer = slog.New(e.logs), e.reg, e.ev.add
	s, err := New(e.config(toml), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	s.Start()
	e.t.Cleanup(func() { s.Shutdown(5 * time.Second) })
	return s
}

// startOneRun starts a singleton task whose one run (its catch-up tick's)
// waits until finish is closed, then ends with res; it returns once that
// run has started.
func (e *env) startOneRun(name string, res tasks.Result) (finish chan struct{}, s *Scheduler, st *lease.Store) {
	e.t.Helper()
	finish = make(chan struct{})
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		<-finish
		return res, nil
	}
	s, st = e.start(fmt.Sprintf("[[tasks]]\nname = %q\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"30s\"\n", name))
	redistest.WaitFor(e.t, 10*time.Second, "the run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	return finish, s, st
}

func entities(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", fmt.Sprint("e", i))
	}
	b.WriteString("]")
	return b.String()
}

func bothStores(t *testing.T, fn func(t *testing.T, withRedis bool)) {
	for _, withRedis := range []bool{true, false} {
		name := "memory"
		if withRedis {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, withRedis)
		})
	}
}

func TestTickRunsEachEntityOnce(t *testing.T) {
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		e.start(`
[[tasks]]
name = "fan"
every = "1s"
handler = "rec"
concurrency = 7
lease_ttl = "3s"
entities = ` + entities(40))
		// Wait for two complete ticks.
		redistest.WaitFor(t, 10*time.Second, "two full ticks", func() bool {
			ticks := map[time.Time]int{}
			for _, r := range e.rec.snapshot() {
				ticks[r.Tick]++
			}
			full := 0
			for _, n := range ticks {
				if n == 40 {
					full++
				}
			}
			return full >= 2
		})
		seen := map[string]int{}
		for _, r := range e.rec.snapshot() {
			if r.Reason != "tick" || r.Tick.Nanosecond() != 0 {
				t.Fatalf("unexpected run %+v", r.Run)
			}
			seen[r.Entity+"@"+r.Tick.String()]++
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("%s ran %d times", k, n)
			}
		}
		if e.rec.overlaps != 0 {
			t.Fatalf("%d overlaps", e.rec.overlaps)
		}
		// A fan-out reports its tick once its last batch is answered, which
		// may be just after that batch's runs were recorded.
		redistest.WaitFor(t, 5*time.Second, "a tick event and a per-tick summary line for each full tick", func() bool {
			return e.ev.count(func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.Entities == 40 }) >= 2 &&
				e.logs.count("tick", map[string]string{KeyTask: "fan", "entities": "40"}) >= 2
		})
	})
}

func TestBusyEntitySkippedByNextTickAndOtherReplica(t *testing.T) {
	e := newEnv(t, true)
	release := make(chan struct{})
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Entity == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return tasks.Done, nil
	}
	cfg := `
[[tasks]]
name = "busy"
every = "1s"
handler = "rec"
lease_ttl = "3s"
entities = ["slow", "fast"]
`
	e.start(cfg)
	e.start(cfg)
	// While "slow" holds its lease, "fast" keeps running every tick.
	redistest.WaitFor(t, 10*time.Second, "three ticks of fast", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Entity == "fast" }) >= 3
	})
	if n := e.rec.count(func(r runRec) bool { return r.Entity == "slow" }); n != 1 {
		t.Fatalf("slow started %d times while busy", n)
	}
	close(release)
	redistest.WaitFor(t, 10*time.Second, "slow runs again once free", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Entity == "slow" }) >= 2
	})
	if e.rec.overlaps != 0 {
		t.Fatalf("%d overlaps", e.rec.overlaps)
	}
	if e.ev.count(func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.Busy > 0 }) == 0 {
		t.Error("no tick counted a busy skip")
	}
	if e.logs.count("entity busy: skipped", map[string]string{KeyEntity: "slow"}) == 0 {
		t.Error("busy skips not logged")
	}
}

func TestTwoReplicasShareTheWork(t *testing.T) {
	e := newEnv(t, true)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		time.Sleep(time.Duration(len(r.Entity)*7%40) * time.Millisecond) // the work itself
		return tasks.Done, nil
	}
	cfg := `
[[tasks]]
name = "shared"
every = "1s"
handler = "rec"
concurrency = 5
lease_ttl = "3s"
entities = ` + entities(60)
	e.start(cfg)
	e.start(cfg)
	redistest.WaitFor(t, 15*time.Second, "three full ticks", func() bool {
		ticks := map[time.Time]int{}
		for _, r := range e.rec.snapshot() {
			ticks[r.Tick]++
		}
		full := 0
		for _, n := range ticks {
			if n >= 60 {
				full++
			}
		}
		return full >= 3
	})
	seen := map[string]int{}
	byReplica := map[int64]bool{}
	for _, r := range e.rec.snapshot() {
		seen[r.Entity+"@"+r.Tick.String()]++
		byReplica[r.Fence] = true
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s ran %d times across two replicas", k, n)
		}
	}
	if e.rec.overlaps != 0 {
		t.Fatalf("%d overlaps", e.rec.overlaps)
	}
	for _, r := range []string{"r1", "r2"} {
		if n := e.ev.count(func(ev Event) bool { return ev.Kind == EventRunStarted && ev.Replica == r }); n == 0 {
			t.Errorf("replica %s started no run: the other did all the work", r)
		}
	}
}

func TestRescheduleChainDrainsWithinTheTick(t *testing.T) {
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		var mu sync.Mutex
		work := map[string]int{"a": 5, "b": 3, "c": 0}
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			if work[r.Entity] > 0 {
				work[r.Entity]--
				if work[r.Entity] > 0 {
					return tasks.Reschedule, nil
				}
			}
			return tasks.Done, nil
		}
		// An hourly task caught up at start: the chain must drain long before
		// the next tick.
		e.start(`
[[tasks]]
name = "drain"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "3s"
entities = ["a", "b", "c"]
`)
		redistest.WaitFor(t, 10*time.Second, "work drained", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return work["a"] == 0 && work["b"] == 0 && e.rec.count(func(r runRec) bool { return r.Entity == "a" && !r.end.IsZero() }) == 5
		})
		runs := e.rec.snapshot()
		tick := runs[0].Tick
		for _, r := range runs {
			if !r.Tick.Equal(tick) {
				t.Fatalf("run %+v belongs to another tick than %v", r.Run, tick)
			}
		}
		if n := e.rec.count(func(r runRec) bool { return r.Entity == "a" && r.Reason == "reschedule" }); n != 4 {
			t.Fatalf("a: %d reschedule runs, want 4", n)
		}
		if n := e.rec.count(func(r runRec) bool { return r.Entity == "c" }); n != 1 {
			t.Fatalf("c ran %d times", n)
		}
	})
}

func TestMaxReschedules(t *testing.T) {
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) { return tasks.Reschedule, nil }
	e.start(`
[[tasks]]
name = "greedy"
every = "1h"
catch_up = "1h"
handler = "rec"
max_reschedules = 3
`)
	e.ev.waitFor(t, 10*time.Second, "max_reschedules reached", kind(EventRescheduleLimit))
	if n := e.rec.count(func(runRec) bool { return true }); n != 4 {
		t.Fatalf("%d runs, want 1 tick run + 3 reschedules", n)
	}
}

func TestQueuedFollowUpRunsAfterNotDuring(t *testing.T) {
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		release := make(chan struct{})
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			if r.Reason == "tick" {
				<-release
			}
			return tasks.Done, nil
		}
		_, st := e.start(`
[[tasks]]
name = "q"
every = "1h"
catch_up = "1h"
on_busy = "queue"
handler = "rec"
lease_ttl = "3s"
`)
		redistest.WaitFor(t, 10*time.Second, "first run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
		// Data changed: ask for a run while the first one is going (three times).
		for range 3 {
			if err := st.Enqueue(context.Background(), lease.Due{Task: "q", Entity: "q", Reason: lease.ReasonTrigger}, 0); err != nil {
				t.Fatal(err)
			}
			redistest.WaitFor(t, 5*time.Second, "trigger taken", func() bool {
				n := 0
				st.DueEntries(context.Background(), "", func(lease.Due) error { n++; return nil }) //nolint:errcheck
				return n == 0
			})
		}
		if n := e.rec.count(func(runRec) bool { return true }); n != 1 {
			t.Fatalf("%d runs while the first holds the lease", n)
		}
		close(release)
		redistest.WaitFor(t, 10*time.Second, "follow-up", func() bool { return e.rec.count(func(runRec) bool { return true }) == 2 })
		runs := e.rec.snapshot()
		if runs[1].Reason != "queued" || runs[1].start.Before(runs[0].end) {
			t.Fatalf("follow-up %+v started %v, first ended %v", runs[1].Run, runs[1].start, runs[0].end)
		}
		// Exactly one follow-up: once it has ended and released, nothing is
		// pending (a second follow-up would have been enqueued by that
		// release, atomically with it).
		e.ev.waitFor(t, 5*time.Second, "the follow-up's end", func(ev Event) bool { return ev.Kind == EventRunEnded && ev.Reason == lease.ReasonQueued })
		state, err := st.Entity(context.Background(), "q", "q")
		if err != nil {
			t.Fatal(err)
		}
		if state.Pending != nil || state.Held != nil {
			t.Errorf("after the follow-up: pending %+v, held %+v; want neither", state.Pending, state.Held)
		}
		if n := e.rec.count(func(runRec) bool { return true }); n != 2 {
			t.Errorf("%d runs, want 2", n)
		}
	})
}

func TestExecSeesEnvAndLiteralEntity(t *testing.T) {
	dir := t.TempDir()
	hostile := "a b;$(touch " + filepath.Join(dir, "pwned") + ")`touch " + filepath.Join(dir, "pwned2") + "` \"q\" 'q'"
	e := newEnv(t, true)
	out := filepath.Join(dir, "out")
	script := filepath.Join(dir, "show.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$1\" > \""+out+".$TICKD_FENCE\"\n"+
		"echo \"env $TICKD_TASK|$TICKD_ENTITY|$TICKD_TICK|$TICKD_FENCE|$TICKD_REASON\"\necho oops >&2\n"), 0o755) //nolint:errcheck
	e.start(fmt.Sprintf(`
[[tasks]]
name = "execd"
every = "1h"
catch_up = "1h"
lease_ttl = "3s"
command = [%q, "{entity}"]
entities = [%q]
`, script, hostile))
	e.ev.waitFor(t, 10*time.Second, "run ended", kind(EventRunEnded))
	matches, _ := filepath.Glob(out + ".*")
	if len(matches) != 1 {
		t.Fatalf("outputs %v", matches)
	}
	got, _ := os.ReadFile(matches[0])
	if string(got) != hostile+"\n" {
		t.Fatalf("argv[1] = %q, want the literal %q", got, hostile)
	}
	for _, f := range []string{"pwned", "pwned2"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Fatalf("the entity id ran a command (%s exists)", f)
		}
	}
	fence := strings.TrimPrefix(filepath.Ext(matches[0]), ".")
	var tick time.Time
	e.ev.count(func(ev Event) bool { tick = ev.Tick; return true })
	// The run's output lines are logged with the run's attributes.
	run := map[string]string{KeyTask: "execd", KeyEntity: hostile, KeyFence: fence, KeyTick: tick.UTC().Format(time.RFC3339)}
	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"env execd|" + hostile + "|" + tick.UTC().Format(time.RFC3339) + "|" + fence + "|tick", map[string]string{"stream": "stdout"}},
		{"oops", map[string]string{"stream": "stderr"}},
		{"run ended", map[string]string{KeyOutcome: "done"}},
	} {
		maps.Copy(want.attrs, run)
		if e.logs.count(want.msg, want.attrs) != 1 {
			t.Errorf("no log line %q with %v", want.msg, want.attrs)
		}
	}
	if t.Failed() {
		t.Log(e.logs)
	}
}

func TestRunStoppedWhenLeaseLost(t *testing.T) {
	e := newEnv(t, true)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		<-ctx.Done()
		return tasks.Done, context.Cause(ctx)
	}
	_, st := e.start(`
[[tasks]]
name = "lost"
every = "1h"
catch_up = "1h"
handler = "rec"
lease_ttl = "1500ms"
`)
	redistest.WaitFor(t, 10*time.Second, "run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	if _, err := st.Unlock(context.Background(), "lost", "lost", "test"); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "run stopped", func() bool {
		return e.rec.count(func(r runRec) bool { return !r.end.IsZero() }) == 1
	})
	r := e.rec.snapshot()[0]
	if !errors.Is(r.cause, lease.ErrLost) {
		t.Fatalf("cause %v", r.cause)
	}
	e.ev.waitFor(t, 5*time.Second, "the run to end as lease_lost", ended(lease.OutcomeLeaseLost))
}

// leapClock moves 10s forward at every reading: a process frozen between any
// two of its steps, in particular between sending an acquire and reading the
// grant.
type leapClock struct{ n atomic.Int64 }

func (c *leapClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.n.Add(1)) * 10 * time.Second)
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

func TestRunNotStartedOnALeaseUntrustedOnArrival(t *testing.T) {
	e := newEnv(t, true)
	st := e.redisStore("tickd", lease.Options{Replica: "frozen", Clock: &leapClock{}})
	st.InitEpoch(context.Background()) //nolint:errcheck
	e.run(lateTask, Options{Store: st})
	e.ev.waitFor(t, 10*time.Second, "the run to end as lease_lost", ended(lease.OutcomeLeaseLost))
	if n := e.rec.count(func(runRec) bool { return true }); n != 0 {
		t.Fatalf("the handler was called %d times on an untrusted lease", n)
	}
	if n := e.ev.count(func(ev Event) bool {
		return ev.Kind == EventRunEnded && errors.Is(ev.Err, tasks.ErrNotStarted) && errors.Is(ev.Err, lease.ErrUntrusted)
	}); n == 0 {
		t.Error("the run's end does not say it never began on an untrusted lease")
	}
	if e.logs.count("run ended", map[string]string{KeyError: tasks.ErrNotStarted.Error() + ": " + lease.ErrUntrusted.Error()}) == 0 {
		t.Errorf("the run's end line does not say why:\n%s", e.logs)
	}
	// The run is handed over, not dropped: a healthy replica carries out the
	// tick's run (its tick is recorded as started, so as a retry of it).
	e.start(lateTask)
	redistest.WaitFor(t, 20*time.Second, "the handed-over run", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Reason == "retry" && !r.Tick.IsZero() }) >= 1
	})
	if n := e.rec.count(func(r runRec) bool { return r.Reason == "tick" }); n != 0 {
		t.Fatalf("%d tick runs: the tick ran twice", n)
	}
}

func TestTimeoutWarnAndRetries(t *testing.T) {
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Reason == "tick" {
			<-ctx.Done() // runs into the timeout
			return tasks.Done, ctx.Err()
		}
		panic("boom") // the retry panics: a failure, not a crash
	}
	e.start(`
[[tasks]]
name = "slowpoke"
every = "1h"
catch_up = "1h"
handler = "rec"
timeout = "300ms"
warn_after = "100ms"
retries = 1
`)
	e.ev.waitFor(t, 10*time.Second, "the retry to fail", ended(lease.OutcomeFailed))
	if n := e.ev.count(func(ev Event) bool {
		return ev.Kind == EventRunEnded && ev.Reason == lease.ReasonRetry && errors.Is(ev.Err, tasks.ErrPanic)
	}); n != 1 {
		t.Errorf("%d retries ended with the handler's panic, want 1", n)
	}
	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"run still going", map[string]string{KeyReason: "tick"}},
		{"run ended", map[string]string{KeyOutcome: "timeout", "next": "retry"}},
		{"run ended", map[string]string{KeyOutcome: "failed", KeyReason: "retry"}},
	} {
		if e.logs.count(want.msg, want.attrs) != 1 {
			t.Errorf("no log line %q with %v", want.msg, want.attrs)
		}
	}
	if n := e.rec.count(func(runRec) bool { return true }); n != 2 {
		t.Fatalf("%d runs, want a run and one retry", n)
	}
	if c := e.rec.snapshot()[0].cause; !errors.Is(c, ErrTimeout) {
		t.Fatalf("cause %v", c)
	}
}

func TestShutdownHandsOverAndReleases(t *testing.T) {
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
	redistest.WaitFor(t, 10*time.Second, "runs started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 2 })
	s.Shutdown(200 * time.Millisecond)
	var held []lease.Held
	st.Leases(context.Background(), "", func(h lease.Held) error { held = append(held, h); return nil }) //nolint:errcheck
	if len(held) != 0 {
		t.Fatalf("leases left after shutdown: %+v", held)
	}
	var due []lease.Due
	st.DueEntries(context.Background(), "", func(d lease.Due) error { due = append(due, d); return nil }) //nolint:errcheck
	if len(due) != 2 || due[0].Reason != lease.ReasonRetry {
		t.Fatalf("hand-over entries %+v", due)
	}
	// Another replica carries them out.
	e.rec.body = nil
	e.start(strings.Replace(cfg, `catch_up = "1h"`, "", 1))
	redistest.WaitFor(t, 10*time.Second, "handed-over runs", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Reason == "retry" && !r.end.IsZero() }) == 2
	})
	if n := e.ev.count(ended(lease.OutcomeCanceled)); n != 2 {
		t.Errorf("%d interrupted runs ended as canceled, want 2", n)
	}
}

func TestReloadAddsAndRemovesTasks(t *testing.T) {
	e := newEnv(t, false)
	s, _ := e.start(`
[[tasks]]
name = "old"
every = "1s"
handler = "rec"
`)
	redistest.WaitFor(t, 10*time.Second, "old runs", func() bool { return e.rec.count(func(r runRec) bool { return r.Task == "old" }) >= 1 })
	if err := s.Reload(e.config(`
[[tasks]]
name = "new"
every = "1s"
handler = "rec"
`)); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	redistest.WaitFor(t, 10*time.Second, "new runs", func() bool { return e.rec.count(func(r runRec) bool { return r.Task == "new" }) >= 2 })
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
	e := newEnv(t, true)
	e.start(`
[[tasks]]
name = "down"
every = "1s"
handler = "rec"
lease_ttl = "1500ms"
entities = ["a", "b"]
`)
	redistest.WaitFor(t, 10*time.Second, "runs", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 2 })
	e.srv.Stop()
	stopped := time.Now()
	// Two ticks pass while Redis is down: no run may start.
	redistest.WaitFor(t, 10*time.Second, "two ticks without Redis", func() bool {
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
	redistest.WaitFor(t, 15*time.Second, "runs resume", func() bool {
		return e.rec.count(func(r runRec) bool { return r.start.After(back) }) >= 2
	})
}

func TestReloadDoesNotDisturbRunningRuns(t *testing.T) {
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
	redistest.WaitFor(t, 10*time.Second, "run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
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
	if n := e.ev.count(ended(lease.OutcomeDone)); n != 1 {
		t.Fatalf("%d runs ended as done, want 1", n)
	}
}

func TestSpreadStartsEntitiesAtTheirOffsets(t *testing.T) {
	e := newEnv(t, false)
	e.start(`
[[tasks]]
name = "spready"
every = "2s"
spread = "1500ms"
handler = "rec"
entities = ["a", "b", "c", "d", "e", "f"]
`)
	redistest.WaitFor(t, 10*time.Second, "one full tick", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 6 })
	runs := e.rec.snapshot()[:6]
	var offs []time.Duration
	for _, r := range runs {
		off := SpreadOffset("spready", r.Entity, 1500*time.Millisecond)
		got := r.start.Sub(r.Tick)
		// Never before its offset; not much after it.
		if got < off || got > off+300*time.Millisecond {
			t.Errorf("%s started %v after the tick, its offset is %v", r.Entity, got, off)
		}
		offs = append(offs, off)
	}
	if offs[0] == offs[len(offs)-1] {
		t.Fatal("offsets not spread")
	}
}

func TestEntityCommandAndFileSources(t *testing.T) {
	e := newEnv(t, false)
	file := filepath.Join(t.TempDir(), "ids")
	os.WriteFile(file, []byte("f1\n\nf2\r\nbad\x00id\nf3"), 0o644) //nolint:errcheck
	e.start(fmt.Sprintf(`
[[tasks]]
name = "fromcmd"
every = "1h"
catch_up = "1h"
handler = "rec"
entities_command = ["seq", "1", "5"]

[[tasks]]
name = "fromfile"
every = "1h"
catch_up = "1h"
handler = "rec"
entities_file = %q
`, file))
	redistest.WaitFor(t, 10*time.Second, "all entities", func() bool { return e.rec.count(func(runRec) bool { return true }) == 8 })
	got := map[string]bool{}
	for _, r := range e.rec.snapshot() {
		got[r.Task+"/"+r.Entity] = true
	}
	for _, want := range []string{"fromcmd/1", "fromcmd/5", "fromfile/f1", "fromfile/f2", "fromfile/f3"} {
		if !got[want] {
			t.Errorf("%s did not run (ran: %v)", want, got)
		}
	}
	if e.logs.count("skipping entity id", map[string]string{KeyTask: "fromfile", "line": "4"}) != 1 {
		t.Errorf("the bad line was not reported:\n%s", e.logs)
	}
}

// TestFirstStartIsNotARedisError: on a Redis new to tickd nothing is
// granted for one MaxTTL (the data-loss quarantine cannot tell a new Redis
// from an emptied one). That is said once, at info, with how long; it is
// not a store error, and the tick waits it out.
func TestFirstStartIsNotARedisError(t *testing.T) {
	e := newEnv(t, true)
	st := e.redisStore("fresh", lease.Options{Replica: "r1", MaxTTL: 2 * time.Second}) // no InitEpoch
	e.run(`
[[tasks]]
name = "first"
every = "1s"
handler = "rec"
lease_ttl = "2s"
entities = ["a", "b", "c"]
`, Options{Store: st})
	redistest.WaitFor(t, 15*time.Second, "runs once the quarantine is over", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 3 })
	said := e.logs.countPrefix("no tickd state in this Redis: a first start, or a data loss; nothing is granted for ")
	expect.Equal(t, "times the quarantine is logged", said, 1)
	expect.Equal(t, "store errors", e.ev.count(kind(EventStoreError)), 0)
	expect.Equal(t, "'cannot acquire' lines", e.logs.count("cannot acquire leases; retrying", nil), 0)
	expect.Equal(t, "ticks with errors", e.ev.count(func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.Errors > 0 }), 0)
}

// TestUnlockDuringARunIsSaid: a run that ends before its holder noticed an
// operator's unlock cannot release (the lease is not its any more); its
// line says the lease was force-released and by whom, not "release
// failed".
func TestUnlockDuringARunIsSaid(t *testing.T) {
	e := newEnv(t, true)
	finish, _, st := e.startOneRun("stuck", tasks.Done)
	if _, err := st.Unlock(context.Background(), "stuck", "stuck", "alice"); err != nil {
		t.Fatal(err)
	}
	close(finish) // long before the next renewal (every 10s) could notice
	e.ev.waitFor(t, 10*time.Second, "the run's end", kind(EventRunEnded))
	expect.Equal(t, "lines saying who force-released the lease",
		e.logs.count("the lease was force-released during the run (tickd unlock); the run's outcome is not recorded", map[string]string{"unlocked_by": "alice"}), 1)
	expect.Equal(t, "bare 'release failed' lines", e.logs.count("release failed", nil), 0)
}

// TestStoreCoversTheLongestLease: a lease store made with a MaxTTL shorter
// than a task's lease_ttl has its data-loss quarantine lengthened by New and
// by Reload, instead of quietly covering too little.
func TestStoreCoversTheLongestLease(t *testing.T) {
	e := newEnv(t, false)
	st := lease.NewMemory(lease.Options{MaxTTL: time.Second})
	t.Cleanup(func() { st.Close() })
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

// TestSourceFailureIsCounted: a tick whose entity source fails says so on
// its tick line and event (it used to show as entities=0 errors=0).
func TestSourceFailureIsCounted(t *testing.T) {
	e := newEnv(t, false)
	e.start(`
[[tasks]]
name = "nofile"
every = "1h"
catch_up = "1h"
handler = "rec"
entities_file = "/nonexistent/ids"
`)
	e.ev.waitFor(t, 10*time.Second, "the tick", kind(EventTick))
	expect.Equal(t, "ticks whose source failed", e.ev.count(func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.SourceFailed }), 1)
	expect.Equal(t, "tick lines saying so", e.logs.count("tick", map[string]string{KeyTask: "nofile", "source_failed": "true"}), 1)
}

// TestDueRunDuringARolloutWaits: a trigger taken by a replica whose config
// does not yet have the task (a rollout) is left for a replica that has it,
// not dropped (it used to be dropped at once); only a task no replica runs
// is dropped.
func TestDueRunDuringARolloutWaits(t *testing.T) {
	e := newEnv(t, true)
	oldCfg := "[[tasks]]\nname = \"old\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	newCfg := oldCfg + "[[tasks]]\nname = \"new\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	_, st := e.start(oldCfg) // r1: takes due runs every 20ms, does not know "new"
	// r2 has "new" but takes no due run for now: it only announces its tasks.
	e.run(newCfg, Options{Store: e.store("r2"), DuePoll: time.Hour, PausePoll: 50 * time.Millisecond})
	redistest.WaitFor(t, 5*time.Second, "r2's tasks announced", func() bool { ok, _ := st.Known(context.Background(), "new"); return ok })
	if err := st.Enqueue(context.Background(), lease.Due{Task: "new", Entity: "x", Reason: lease.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	deferredByR1 := func(ev Event) bool { return ev.Kind == EventDueDeferred && ev.Replica == "r1" && ev.Task == "new" }
	redistest.WaitFor(t, 10*time.Second, "r1 to leave the run twice", func() bool { return e.ev.count(deferredByR1) >= 2 })
	expect.Equal(t, "runs dropped", e.ev.count(kind(EventDueDropped)), 0)
	state, err := st.Entity(context.Background(), "new", "x")
	if err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the trigger is still pending", state.Pending != nil)

	// A replica that has the task carries it out.
	e.start(newCfg)
	redistest.WaitFor(t, 10*time.Second, "the trigger's run", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Task == "new" && r.Entity == "x" }) == 1
	})

	// A task no replica runs is dropped.
	if err := st.Enqueue(context.Background(), lease.Due{Task: "ghost", Entity: "y", Reason: lease.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	e.ev.waitFor(t, 10*time.Second, "the ghost's run dropped", func(ev Event) bool { return ev.Kind == EventDueDropped && ev.Task == "ghost" })
	state, _ = st.Entity(context.Background(), "ghost", "y")
	expect.True(t, "the ghost's run is gone", state.Pending == nil)
}

// TestShutdownWithRedisDownKeepsItsTimeout: a run that asks for a
// reschedule while Redis is down leaves a request that cannot be stored;
// SIGTERM's shutdown still ends within shutdown_timeout and a few seconds
// (the release's own bound), not after the request's retries, and says
// what it could not store.
func TestShutdownWithRedisDownKeepsItsTimeout(t *testing.T) {
	e := newEnv(t, true)
	finish, s, _ := e.startOneRun("more", tasks.Reschedule)
	e.srv.Stop()
	close(finish) // ends asking for a reschedule that Redis cannot take
	const timeout = 500 * time.Millisecond
	stopped := make(chan struct{})
	start := time.Now()
	go func() { s.Shutdown(timeout); close(stopped) }()
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

// TestDueRunGetsASlotUnderBacklog: runs longer than the interval keep late
// fan-outs waiting for every slot the moment it frees; a due run (here a
// trigger) still gets a slot within a bounded time, instead of being given
// back for ever.
func TestDueRunGetsASlotUnderBacklog(t *testing.T) {
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			if r.Reason == "tick" {
				select {
				case <-ctx.Done():
				case <-time.After(700 * time.Millisecond): // the run's work: longer than the interval
				}
			}
			return tasks.Done, nil
		}
		_, st := e.start(`
[[tasks]]
name = "slow"
every = "1s"
concurrency = 1
handler = "rec"
lease_ttl = "3s"
entities = ["a", "b", "c"]
`)
		redistest.WaitFor(t, 15*time.Second, "a backlog of tick runs", func() bool {
			return e.rec.count(func(r runRec) bool { return r.Reason == "tick" }) >= 3
		})
		if err := st.Enqueue(context.Background(), lease.Due{Task: "slow", Entity: "a", Reason: lease.ReasonTrigger}, 0); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 3*dueSlotWait/2, "the trigger's run", func() bool {
			return e.rec.count(func(r runRec) bool { return r.Reason == "trigger" }) == 1
		})
	})
}

// TestDuplicateReplicaIDIsWarned: two replicas given one replica_id run
// (their leases stay exclusive), but each is told, at WARN, that another
// process uses its id.
func TestDuplicateReplicaIDIsWarned(t *testing.T) {
	e := newEnv(t, true)
	cfg := "[[tasks]]\nname = \"d\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	for range 2 {
		st := e.redisStore("tickd", lease.Options{Replica: "same"})
		e.run(cfg, Options{Store: st, PausePoll: 50 * time.Millisecond})
	}
	redistest.WaitFor(t, 10*time.Second, "the duplicate warned", func() bool {
		return e.logs.countPrefix("another tickd process uses this replica_id") >= 1
	})
}

// TestOpenStoreFromConfig: Config.OpenStore opens the Redis the [redis]
// table names (leases there, seen by any other store on that prefix), and
// the in-process store without one.
func TestOpenStoreFromConfig(t *testing.T) {
	e := newEnv(t, true)
	cfg := e.config(fmt.Sprintf("[redis]\nurl = %q\nkey_prefix = \"emb\"\n[[tasks]]\nname = \"t\"\nevery = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"2s\"\n", e.srv.URL()))
	st, closeStore, err := cfg.OpenStore(lease.Options{Replica: "emb-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore() //nolint:errcheck
	if st.MaxTTL() != 2*time.Second {
		t.Errorf("MaxTTL %v, want the config's lease_ttl", st.MaxTTL())
	}
	other := e.redisStore("emb", lease.Options{Replica: "other"})
	other.InitEpoch(context.Background()) //nolint:errcheck
	l, err := st.Acquire(context.Background(), lease.Request{Task: "t", Entity: "x", TTL: 2 * time.Second, Reason: lease.ReasonTrigger})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background(), lease.Finished{Outcome: lease.OutcomeDone}, nil) //nolint:errcheck
	var be *lease.BusyError
	if _, err := other.Acquire(context.Background(), lease.Request{Task: "t", Entity: "x", TTL: 2 * time.Second, Reason: lease.ReasonTrigger}); !errors.As(err, &be) || be.Holder != "emb-1" {
		t.Fatalf("another store on the config's Redis and prefix: %v, want busy, held by emb-1", err)
	}
	mem, closeMem, err := e.config("[[tasks]]\nname = \"t\"\nevery = \"1h\"\nhandler = \"rec\"\n").OpenStore(lease.Options{})
	if err != nil || mem == nil {
		t.Fatalf("without [redis]: %v", err)
	}
	closeMem() //nolint:errcheck
}

// TestTickStoppedByShutdownSaysSo: a fan-out that shutdown stops while it
// waits for run slots reports its tick as stopped, its entities counting
// those read until then (a 4-entity list looked like a 3-entity one).
func TestTickStoppedByShutdownSaysSo(t *testing.T) {
	e := newEnv(t, false)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		<-ctx.Done()
		return tasks.Done, nil
	}
	s, _ := e.start(`
[[tasks]]
name = "backlog"
every = "1h"
catch_up = "1h"
concurrency = 1
handler = "rec"
entities = ["a", "b", "c", "d"]
`)
	redistest.WaitFor(t, 10*time.Second, "the first run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	s.Shutdown(100 * time.Millisecond)
	ticks := e.ev.events(kind(EventTick))
	if len(ticks) != 1 || !ticks[0].Counts.Stopped || ticks[0].Counts.Entities >= 4 {
		t.Fatalf("tick events %+v: want one, stopped, with fewer than the 4 entities read", ticks)
	}
}
