// Package taskstest calls a Go handler in a test the way tickd calls it:
// through Handler.Do (a panic is a failure), with a ctx whose
// deadline is the task's timeout and which tickd cancels, with a cause,
// when the run must stop; and it fails the test when the handler does not
// honour that ctx (tasks.Handler's one rule).
//
//	res, err := taskstest.Call(t, syncUser, taskstest.Run{Entity: "42"})
//	// the handler stopped when its lease was lost, 50ms in:
//	_, err = taskstest.Call(t, syncUser, taskstest.Run{Entity: "42", StopAfter: 50 * time.Millisecond})
package taskstest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
	"github.com/tickd/tickd/tickdtype"
)

// Run is one call of a handler: what its tasks.Run carries, and how tickd
// stops it. Every field may be left out.
type Run struct {
	Task, Entity string
	Tick         time.Time        // zero: now, to the second
	Fence        int64            // zero: 1
	Reason       tickdtype.Reason // "": tickdtype.ReasonTick
	Attempt      int
	// Timeout is the task's timeout: ctx's deadline, after which ctx is
	// cancelled with tasks.ErrTimeout. Zero: 1h, tickd's default.
	Timeout time.Duration
	// StopAfter, when set, cancels ctx that long into the call, with Cause
	// (lease.ErrLost unless said): a lease lost, an unlock
	// (lease.ErrRevoked), a shutdown (tasks.ErrShutdown).
	StopAfter time.Duration
	Cause     error
}

// Grace is how long a handler has to return once its ctx is cancelled:
// tickd reports one still going then (tickd_handler_overruns_total).
const Grace = 2 * time.Second

// ErrOverran is Call's error for a handler that did not return within
// Grace of its ctx's cancellation.
var ErrOverran = errors.New("taskstest: the handler went on after its ctx was cancelled")

// Call calls h as tickd calls a handler for r, and returns what it
// returned. The run's logger writes to t.Log. If ctx is cancelled and h
// has not returned Grace later, Call fails t and returns ErrOverran
// without waiting for it.
func Call(t testing.TB, h tasks.Handler, r Run) (tasks.Result, error) {
	t.Helper()
	if r.Tick.IsZero() {
		r.Tick = time.Now().UTC().Truncate(time.Second)
	}
	if r.Fence == 0 {
		r.Fence = 1
	}
	if r.Reason == "" {
		r.Reason = driver.ReasonTick
	}
	if r.Timeout <= 0 {
		r.Timeout = time.Hour
	}
	if r.Cause == nil {
		r.Cause = lease.ErrLost
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), r.Timeout, tasks.ErrTimeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if r.StopAfter > 0 {
		timer := time.AfterFunc(r.StopAfter, func() { stop(r.Cause) })
		defer timer.Stop()
	}
	log := slog.New(slog.NewTextHandler(logWriter{t}, nil)).With("task", r.Task, "entity", r.Entity, "fence", r.Fence)
	run := tasks.Run{Task: r.Task, Entity: r.Entity, Tick: r.Tick, Fence: r.Fence, Reason: r.Reason, Attempt: r.Attempt, Logger: log}
	type answer struct {
		res tasks.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := h.Do(ctx, run)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(Grace)
	defer grace.Stop()
	select {
	case a := <-done:
		return a.res, a.err
	case <-grace.C:
		t.Errorf("the handler went on %v after its ctx was cancelled (%v): it must return soon after (tasks.Handler)", Grace, context.Cause(ctx))
		return tasks.Done, ErrOverran
	}
}

// logWriter writes a run's lines to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
