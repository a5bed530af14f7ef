// Package tasks is what a run executes — an exec command, an HTTP POST or a
// registered Go handler — and where a task's entities come from.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/tickd/tickd/internal/proc"
	"github.com/tickd/tickd/tickdtype"
)

// Run is what a run sees.
type Run struct {
	Task    string
	Entity  string
	Tick    time.Time        // the tick the run belongs to (UTC)
	Fence   int64            // fencing token of the run's lease
	Reason  tickdtype.Reason // tick, reschedule, retry, trigger or queued
	Attempt int              // consecutive reschedules or retries before this run
	// Attributes are the entity's, as its source gave them at the tick
	// (nil for a source of bare ids, and for a run that is not a tick's:
	// a reschedule, a retry, a trigger). A handler must not change them.
	Attributes Attributes
	// Logger carries the run's attributes (task, entity, tick, fence,
	// reason, replica).
	Logger *slog.Logger
	// Check, when set, says without waiting whether the run may still
	// begin (the scheduler gives its lease's Check). ctx's cancellation
	// arrives asynchronously, so a daemon frozen between taking the lease
	// and starting the run would wake up and start it on a lease it can no
	// longer trust; actions call Check right before their first step that
	// cannot be taken back (exec: the process start; HTTP: the request)
	// and return its error instead of starting.
	Check func() error
	// Quota, when set, is told what the run's API said of its rate limit
	// (QuotaOf): an HTTP action tells it every answer's fields (none, for
	// an answer without them), an exec action the fields its output printed
	// ("RateLimit-Policy: …" lines, as curl -D - prints them), or none when
	// it succeeded without printing any. A limit with rate = "auto" paces
	// to it.
	Quota func(Quota)
}

// ErrNotStarted is wrapped by the error of a run whose Check failed: the
// action did not begin, so the run can be handed over whole.
var ErrNotStarted = proc.ErrNotStarted

// check calls run.Check if it is set; its error wraps ErrNotStarted.
func (run Run) check() error { return proc.CheckStart(run.Check) }

// Result is what a successful run asks for next.
type Result int

const (
	// Done: nothing left; wait for the next tick.
	Done Result = iota
	// Reschedule: more work left; run again soon, after the lease is free.
	Reschedule
)

func (r Result) String() string {
	if r == Reschedule {
		return "reschedule"
	}
	return "done"
}

// Handler is a Go task. ctx is cancelled when the run must stop (timeout,
// lease lost or untrusted, an unlock, shutdown); context.Cause says why,
// and its Deadline is the end of the task's timeout. An error means
// the run failed. A handler is called concurrently, up to the task's
// concurrency on each replica, for different entities: it must be safe for
// that (never twice at once for one entity: that is what the lease is for).
//
// A handler must honour ctx: pass it to every call that waits (HTTP, SQL,
// Redis) and return soon after it is cancelled. Go cannot stop a goroutine,
// so tickd's promises rest on it: a handler that goes on after its lease
// could no longer be trusted may overlap a run of the same entity on
// another replica, and a shutdown cannot wait for it. One still going 2s
// after its ctx was cancelled is logged at ERROR with its fence and counted
// (tickd_handler_overruns_total); tickd.Tickd's Stop does not wait for
// it, and returns tickd.ErrRunsGoOn.
type Handler func(ctx context.Context, run Run) (Result, error)

// Action runs one run of a task.
type Action interface {
	Do(ctx context.Context, run Run) (Result, error)
}

// Do calls the handler: a Handler is an Action. A panic is a failure
// (ErrPanic, with its stack); a run that fails its own check (Run's
// fields) is one too, and the handler is not called.
func (h Handler) Do(ctx context.Context, run Run) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	if err := run.check(); err != nil {
		return Done, err
	}
	return h(ctx, run)
}

// ErrPanic wraps a panic recovered from a Go handler.
var ErrPanic = errors.New("tasks: handler panicked")

// Registry maps handler names (the config's `handler` key) to Go handlers.
// The zero value is ready to use.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Handler
}

// Register adds a handler under name; it fails if the name is taken.
func (r *Registry) Register(name string, h Handler) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]Handler{}
	}
	if _, ok := r.m[name]; ok {
		return fmt.Errorf("tasks: handler %q registered twice", name)
	}
	if h == nil || name == "" {
		return fmt.Errorf("tasks: handler %q: a name and a function are needed", name)
	}
	r.m[name] = h
	return nil
}

// Lookup returns the handler registered under name.
func (r *Registry) Lookup(name string) (Handler, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.m[name]
	return h, ok
}

// Names lists the registered handlers, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	ns := make([]string, 0, len(r.m))
	for n := range r.m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
