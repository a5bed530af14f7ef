package taskstest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
	"github.com/tickd/tickd/tasks/taskstest"
)

// waits is a handler that honours ctx: it waits for it and returns its
// cause.
func waits(ctx context.Context, _ tasks.Run) (tasks.Result, error) {
	<-ctx.Done()
	return tasks.Done, context.Cause(ctx)
}

// TestCallStopsAsTickdStops: a handler that honours ctx returns the cause
// tickd gives: a lost lease (StopAfter), the task's timeout; what it is
// called with is what a tick's run carries; a panic is a failed run.
func TestCallStopsAsTickdStops(t *testing.T) {
	t.Parallel()
	_, err := taskstest.Call(t, waits, taskstest.Run{Entity: "u1", StopAfter: 10 * time.Millisecond})
	expect.True(t, fmt.Sprintf("stopped: %v, want lease.ErrLost", err), errors.Is(err, lease.ErrLost))
	_, err = taskstest.Call(t, waits, taskstest.Run{Entity: "u1", Timeout: 10 * time.Millisecond})
	expect.True(t, fmt.Sprintf("timed out: %v, want tasks.ErrTimeout", err), errors.Is(err, tasks.ErrTimeout))
	res, err := taskstest.Call(t, func(_ context.Context, r tasks.Run) (tasks.Result, error) {
		r.Logger.Info("working", "attempt", r.Attempt)
		if r.Entity != "u2" || r.Reason != driver.ReasonTick || r.Fence != 1 || r.Tick.IsZero() {
			return tasks.Done, fmt.Errorf("called with %+v", r)
		}
		return tasks.Reschedule, nil
	}, taskstest.Run{Entity: "u2"})
	expect.True(t, fmt.Sprintf("answer %v, %v", res, err), res == tasks.Reschedule && err == nil)
	_, err = taskstest.Call(t, func(context.Context, tasks.Run) (tasks.Result, error) { panic("boom") }, taskstest.Run{})
	expect.True(t, fmt.Sprintf("a panic: %v, want tasks.ErrPanic", err), errors.Is(err, tasks.ErrPanic))
}

// failures records what a test would be failed with.
type failures struct {
	testing.TB
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// TestCallFailsAHandlerThatIgnoresCtx: a handler still going Grace after
// its ctx was cancelled fails the test, and Call does not wait for it.
func TestCallFailsAHandlerThatIgnoresCtx(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	f := &failures{TB: t}
	_, err := taskstest.Call(f, func(context.Context, tasks.Run) (tasks.Result, error) {
		<-release
		return tasks.Done, nil
	}, taskstest.Run{StopAfter: 10 * time.Millisecond})
	expect.True(t, fmt.Sprintf("Call: %v, want ErrOverran", err), errors.Is(err, taskstest.ErrOverran))
	expect.Equal(t, "the test failed", len(f.errs), 1)
}
