package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
)

// TestAWorkersTimerHoldsEachRunsTimeout: a worker's timer is set lazily
// (worker.begin), so one goroutine's runs of tasks with other timeouts
// must each be stopped at its own: a short timeout after a long one's run
// is not left to the long one's timer, and a long one after a short one's
// is not stopped at the short one's.
func TestAWorkersTimerHoldsEachRunsTimeout(t *testing.T) {
	st := stores.Memory(lease.Options{Replica: "a"})
	t.Cleanup(func() { st.Stop(context.Background()) })
	s := &Scheduler{abort: context.Background()}
	w := &worker{}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	t.Cleanup(func() { w.timer.Stop() })
	n := 0
	run := func(timeout time.Duration) *running {
		n++
		l, err := st.Acquire(context.Background(), driver.Request{Task: "t", Entity: string(rune('a' + n)), TTL: time.Minute, Reason: driver.ReasonTrigger})
		if err != nil {
			t.Fatal(err)
		}
		r := &running{s: s, ts: &taskState{t: config.Task{Name: "t", Timeout: timeout}}, l: l}
		w.begin(s, r)
		return r
	}
	timedOut := func(r *running) bool { return errors.Is(context.Cause(r.l.Context()), ErrTimeout) }

	long := run(time.Hour)
	w.end()
	short := run(200 * time.Millisecond)
	expect.WaitFor(t, 5*time.Second, "the short run stopped at its timeout, after a long one's run", func() bool { return timedOut(short) })
	w.end()

	short = run(100 * time.Millisecond)
	w.end()
	long = run(time.Hour)
	// The short run's timer fires during the long run: it must set the
	// timer again for the long run's timeout, not stop the run, nor leave
	// it without a timer.
	expect.WaitFor(t, 5*time.Second, "the timer set again for the long run", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.due.IsZero() && w.due.After(long.began.Add(time.Minute))
	})
	expect.True(t, "the long run goes on", !timedOut(long) && long.l.Context().Err() == nil)
	w.end()
}

// BenchmarkWorkerBeginEnd is what a run's start and end cost its worker's
// timer: with the timer set lazily, nothing for runs far shorter than
// their timeout.
func BenchmarkWorkerBeginEnd(b *testing.B) {
	st := stores.Memory(lease.Options{Replica: "a"})
	b.Cleanup(func() { st.Stop(context.Background()) })
	l, err := st.Acquire(context.Background(), driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger})
	if err != nil {
		b.Fatal(err)
	}
	s := &Scheduler{abort: context.Background()}
	w := &worker{}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	b.Cleanup(func() { w.timer.Stop() })
	r := &running{s: s, ts: &taskState{t: config.Task{Name: "t", Timeout: time.Hour}}, l: l}
	for b.Loop() {
		w.begin(s, r)
		w.end()
	}
}
