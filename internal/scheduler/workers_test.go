package scheduler

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
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
		w.begin(s, r, time.Now())
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
		w.begin(s, r, time.Now())
		w.end()
	}
}

// testWorkers is a pool whose runs are run's, without a scheduler.
func testWorkers(t *testing.T, run func(job)) (ws *workers, quit func()) {
	q := make(chan struct{})
	ws = &workers{run: func(_ *worker, j job) { run(j) }, quit: q, all: map[*worker]struct{}{}}
	var once sync.Once
	quit = func() { once.Do(func() { close(q) }) }
	t.Cleanup(quit)
	return ws, quit
}

// TestNoRunWaitsForAnother: the workers take queued runs one after the
// other, but a run never waits for another's end. 300 runs, each blocked
// until all 300 have begun, all begin: a worker that takes a run while
// others wait calls the next worker, every time.
func TestNoRunWaitsForAnother(t *testing.T) {
	t.Parallel()
	const n = 300
	var begun atomic.Int32
	all := make(chan struct{})
	ws, _ := testWorkers(t, func(job) {
		if begun.Add(1) == n {
			close(all)
		}
		<-all
	})
	for range n {
		ws.do(job{})
	}
	expect.WaitFor(t, 10*time.Second, "every run begun, none waiting for another's end", func() bool { return begun.Load() == n })
	// Once the runs ended, each worker waits, idle, and a new run is taken
	// by one of them rather than a new goroutine.
	expect.WaitFor(t, 10*time.Second, "the workers idle", func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		return len(ws.idle) == n && ws.coming == 0
	})
	ran := make(chan struct{})
	ws.run = func(*worker, job) { close(ran) }
	ws.do(job{})
	<-ran
	ws.mu.Lock()
	defer ws.mu.Unlock()
	expect.Equal(t, "workers after one more run", len(ws.all), n)
}

// TestEveryQueuedRunRunsOnce: runs queued from several goroutines, while
// workers park, are called and exit at the loops' stop, each run once.
func TestEveryQueuedRunRunsOnce(t *testing.T) {
	t.Parallel()
	const senders, each = 4, 5000
	var ran [senders * each]atomic.Int32
	ws, quit := testWorkers(t, func(j job) {
		ran[j.limitWait].Add(1)
		if j.limitWait%97 == 0 {
			runtime.Gosched()
		}
	})
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				ws.do(job{limitWait: time.Duration(s*each + i)})
				if s == 0 && i == each/2 {
					quit() // the loops stop: idle workers exit, runs queued still run
				}
			}
		})
	}
	wg.Wait()
	expect.WaitFor(t, 10*time.Second, "every run ran", func() bool {
		for i := range ran {
			if ran[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	for i := range ran {
		expect.Equal(t, "runs of run "+strconv.Itoa(i), ran[i].Load(), int32(1))
	}
	expect.WaitFor(t, 10*time.Second, "the workers exited after the stop", func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		return len(ws.all) == 0
	})
}
