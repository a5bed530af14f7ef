package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/tasks"
)

// recorder is a Go handler that records every run and detects overlaps of
// one entity's runs, across all schedulers of a test.
// fullTicks counts the ticks with n runs recorded, or more.
func (rc *recorder) fullTicks(n int) int {
	ticks := map[time.Time]int{}
	for _, run := range rc.snapshot() {
		ticks[run.Tick]++
	}
	full := 0
	for _, k := range ticks {
		if k >= n {
			full++
		}
	}
	return full
}

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
	expect.WaitFor(t, d, what, func() bool { return ev.count(pred) > 0 })
}

func kind(k EventKind) func(Event) bool { return func(e Event) bool { return e.Kind == k } }

func ended(outcome driver.Outcome) func(Event) bool {
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
	time        time.Time
	level       slog.Level
	msg         string
	attrs       map[string]string
	badDuration string // an attribute logged as a time.Duration
}

func newLogRecords() *logRecords { return &logRecords{mu: &sync.Mutex{}, recs: &[]logRec{}} }

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{time: r.Time, level: r.Level, msg: r.Message, attrs: map[string]string{}}
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

// all is a copy of the records so far.
func (h *logRecords) all() []logRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.recs)
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
			e.mem = stores.Memory(lease.Options{Replica: replica})
			t.Cleanup(func() { e.mem.Stop(context.Background()) })
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
	return e.redisStoreVia(redis.Options{MaxRetries: -1}, prefix, opts)
}

// redisStoreVia is redisStore with a client of co's options (a proxy's
// address, a user), on the test's Redis unless co names another address.
func (e *env) redisStoreVia(co redis.Options, prefix string, opts lease.Options) *lease.Store {
	if co.Addr == "" {
		co.Addr = e.srv.Addr
	}
	co.ContextTimeoutEnabled = true
	c := redis.NewClient(&co)
	s, err := stores.Redis(c, prefix, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Stop(context.Background()); c.Close() })
	return s
}

func (e *env) config(toml string) *config.Config {
	e.t.Helper()
	cfg, err := config.Parse("test.toml", []byte(toml))
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
	if err := s.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { stopWithin(s, 5*time.Second) })
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
	expect.WaitFor(e.t, 10*time.Second, "the run started", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
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

// stopWithin stops s, giving its runs d to end (the daemon's
// shutdown_timeout).
func stopWithin(s *Scheduler, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s.Stop(ctx) //nolint:errcheck // nil
}
