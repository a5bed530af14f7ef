package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/tasks"
)

// overruns counts Metrics.Overran, and records nothing else.
type overruns struct {
	noMetrics
	n atomic.Int32
}

func (o *overruns) Overran(string) { o.n.Add(1) }

// deaf runs a singleton task (its catch-up tick at once) of the toml keys
// extra whose Go handler blocks until the test ends, whatever its ctx
// says: a handler that does not honour it. Its overruns are counted.
func deaf(t *testing.T, name, extra string) (*env, *Scheduler, *overruns) {
	e := newEnv(t, false)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.rec.body = func(context.Context, tasks.Run) (tasks.Result, error) {
		<-release
		return tasks.Done, nil
	}
	m := &overruns{}
	s := e.run(fmt.Sprintf("[[tasks]]\nname = %q\nevery = \"1h\"\ncatch_up = \"1h\"\nhandler = \"rec\"\nlease_ttl = \"30s\"\n%s", name, extra),
		Options{Store: e.store("r1"), Metrics: m})
	return e, s, m
}

// TestStopDoesNotWaitForAHandlerThatIgnoresCtx: Stop gives the runs its
// ctx, stops them, and returns a grace later with ErrRunsGoOn when a Go
// handler goes on; the run is logged at ERROR with its fence and counted.
// Before, Stop waited for the handler for ever.
func TestStopDoesNotWaitForAHandlerThatIgnoresCtx(t *testing.T) {
	t.Parallel()
	e, s, m := deaf(t, "deaf", "")
	expect.WaitFor(t, 10*time.Second, "the run started", func() bool { return e.ev.count(kind(EventRunStarted)) == 1 })
	fence := e.ev.events(kind(EventRunStarted))[0].Fence
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		done <- s.Stop(ctx)
	}()
	select {
	case err := <-done:
		expect.True(t, fmt.Sprintf("Stop: %v, want ErrRunsGoOn", err), errors.Is(err, ErrRunsGoOn))
	case <-time.After(30 * time.Second):
		t.Fatal("Stop still waits for a handler that does not honour its ctx")
	}
	expect.Equal(t, "runs counted as overrunning", m.n.Load(), int32(1))
	expect.Equal(t, "ERROR lines with the run's fence", e.logs.count(msgOverran, map[string]string{"entity": "deaf", "fence": fmt.Sprint(fence)}), 1)
	// The line's stopped_for counts from the stop (the abort), a grace
	// before the line: not 0s, as when it counted from its own moment.
	for _, r := range e.logs.all() {
		if r.msg == msgOverran {
			d, err := time.ParseDuration(r.attrs["stopped_for"])
			expect.True(t, fmt.Sprintf("stopped_for %q: the grace since the abort", r.attrs["stopped_for"]), err == nil && d >= handlerGrace-100*time.Millisecond)
		}
	}
}

// TestHandlerPastItsCancellationIsReported: a Go handler still going a
// grace after its run's context was cancelled (here by the task's
// timeout) is logged at ERROR with its fence, once, and counted.
func TestHandlerPastItsCancellationIsReported(t *testing.T) {
	t.Parallel()
	e, s, m := deaf(t, "slow", "timeout = \"200ms\"\n")
	expect.WaitFor(t, 10*time.Second, "the overrun counted", func() bool { return m.n.Load() > 0 })
	expect.Equal(t, "ERROR lines", e.logs.count(msgOverran, map[string]string{"entity": "slow", "cause": ErrTimeout.Error()}), 1)
	stopWithin(s, 10*time.Millisecond) // counted once, not again by the stop
	expect.Equal(t, "runs counted as overrunning", m.n.Load(), int32(1))
}
