package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"
)

// workerIdle is how long a goroutine that ran a run waits for the next one
// before it exits: longer than the usual time between ticks.
const workerIdle = 2 * time.Minute

// workers reuses the goroutines runs go on, and each one's timer. A run's
// goroutine grows its stack; a new goroutine per run grew it again for
// every run, a tenth of the daemon's CPU in a 100,000-entity tick, and a
// timer and a shutdown hook per run were another tenth
// (docs/performance.md). Idle workers exit once the scheduler's loops stop
// (Shutdown).
//
// Runs wait in a queue, in the order they were started, and the workers
// take them from it: a worker back from a run takes the next one without
// being woken. Whenever the queue holds a run, one more worker is on its
// way to it (called: an idle one woken, or a new one), so no run waits for
// another's end: a worker that takes a run while others wait calls the
// next one, as Go's own scheduler keeps one spinning thread while work
// waits. A tick's batch of short runs is so taken by the one or two
// workers already going, where handing each run to a worker of its own
// woke one per run, a third of the daemon's CPU in a 100,000-entity tick
// (docs/performance.md, "Why the code looks like this", item 12).
type workers struct {
	s    *Scheduler
	run  func(*worker, job) // s.execute
	quit <-chan struct{}

	mu     sync.Mutex
	all    map[*worker]struct{} // for abort
	queue  []job                // runs waiting, from head on
	head   int
	idle   []*worker // parked, the last parked last
	coming int       // workers called and not yet at the queue
}

// worker is one goroutine of workers, and the run it is on.
type worker struct {
	wake chan struct{} // a parked worker's call, buffered: a caller never waits
	// timer fires at the current run's warn_after, then at its timeout
	// (fire). It is set lazily: due is when it fires (zero: not set), and
	// a run whose deadline is later leaves it (fire sets it again for the
	// run then going on), so that runs far shorter than their timeout set
	// it once, not twice each (docs/performance.md).
	timer *time.Timer

	mu  sync.Mutex
	cur *running
	due time.Time
}

// do queues j, calling a worker to it unless one is already on its way.
func (ws *workers) do(j job) {
	ws.mu.Lock()
	ws.queue = append(ws.queue, j)
	w, start := ws.callLocked()
	ws.mu.Unlock()
	ws.call(w, start)
}

// callLocked picks the worker to call when runs wait and none is on its
// way: an idle one, or a new one (start).
func (ws *workers) callLocked() (w *worker, start bool) {
	if ws.coming > 0 || ws.head == len(ws.queue) {
		return nil, false
	}
	ws.coming++
	if n := len(ws.idle); n > 0 {
		w = ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
		return w, false
	}
	return nil, true
}

// call wakes w, or starts a new worker.
func (ws *workers) call(w *worker, start bool) {
	switch {
	case w != nil:
		w.wake <- struct{}{}
	case start:
		go ws.loop()
	}
}

// popLocked takes the queue's first run, if any.
func (ws *workers) popLocked() (job, bool) {
	if ws.head == len(ws.queue) {
		ws.queue, ws.head = ws.queue[:0], 0
		return job{}, false
	}
	j := ws.queue[ws.head]
	ws.queue[ws.head] = job{}
	ws.head++
	// A queue that never empties is moved down once half of it is done.
	if ws.head >= 64 && ws.head*2 >= len(ws.queue) {
		n := copy(ws.queue, ws.queue[ws.head:])
		clear(ws.queue[n:])
		ws.queue, ws.head = ws.queue[:n], 0
	}
	return j, true
}

// loop is a called worker's life: it takes runs from the queue until it
// is empty, then waits to be called again.
func (ws *workers) loop() {
	w := &worker{wake: make(chan struct{}, 1)}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	ws.mu.Lock()
	ws.all[w] = struct{}{}
	ws.mu.Unlock()
	// The idle timer is not set again for each run: a worker that ran
	// since it last fired waits another workerIdle, so it exits after
	// between one and two of them without a run.
	idle := time.NewTimer(workerIdle)
	defer func() {
		idle.Stop()
		w.timer.Stop()
		ws.mu.Lock()
		delete(ws.all, w)
		ws.mu.Unlock()
	}()
	ran := false
	for {
		ws.mu.Lock()
		ws.coming--
		for {
			j, ok := ws.popLocked()
			if !ok {
				break
			}
			c, start := ws.callLocked()
			ws.mu.Unlock()
			ws.call(c, start)
			ws.run(w, j)
			ran = true
			ws.mu.Lock()
		}
		ws.idle = append(ws.idle, w)
		ws.mu.Unlock()
		if !ws.park(w, idle, &ran) {
			return
		}
	}
}

// park waits until w is called, and answers true; or false when it is to
// exit (idle for workerIdle, or the loops stopped) and no one called it.
func (ws *workers) park(w *worker, idle *time.Timer, ran *bool) bool {
	for {
		select {
		case <-w.wake:
			return true
		case <-idle.C:
			if *ran {
				*ran = false
				idle.Reset(workerIdle)
				continue
			}
		case <-ws.quit:
		}
		ws.mu.Lock()
		if i := slices.Index(ws.idle, w); i >= 0 {
			ws.idle = slices.Delete(ws.idle, i, i+1)
			ws.mu.Unlock()
			return false
		}
		ws.mu.Unlock()
		<-w.wake // called meanwhile: the call is on its way
		return true
	}
}

// abort stops the runs going on with cause, through Lease.Cancel. A run
// that starts after it sees the scheduler's abort context cancelled
// (worker.begin).
func (ws *workers) abort(cause error) {
	now := time.Now()
	ws.each(func(r *running) {
		if r.stoppedAt.IsZero() {
			r.stoppedAt = now // the overrun line's stopped_for counts from here, not from when the watch saw it
		}
		r.l.Cancel(cause)
	})
}

// each calls fn with each run going on, its worker's lock held.
func (ws *workers) each(fn func(r *running)) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for w := range ws.all {
		w.mu.Lock()
		if w.cur != nil {
			fn(w.cur)
		}
		w.mu.Unlock()
	}
}

// begin makes r w's current run, begun at now (wall time): its timer is
// set for warn_after, or for the timeout when there is no warning to give;
// a shutdown that already aborted the runs stops it at once.
func (w *worker) begin(s *Scheduler, r *running, now time.Time) {
	warnAfter, timeout := r.ts.t.WarnAfter, r.ts.t.Timeout
	r.began = now
	r.ctx.deadline = r.began.Add(timeout)
	first := timeout
	if warnAfter <= 0 || warnAfter >= timeout {
		r.warned = true
	} else {
		first = warnAfter
	}
	w.mu.Lock()
	w.cur = r
	if at := r.began.Add(first); w.due.IsZero() || w.due.After(at) {
		w.due = at
		w.timer.Reset(first)
	}
	w.mu.Unlock()
	if s.abort.Err() != nil {
		r.l.Cancel(context.Cause(s.abort))
	}
}

// end says w's run is over; its timer is left set (begin).
func (w *worker) end() {
	w.mu.Lock()
	w.cur = nil
	w.mu.Unlock()
}

// fire warns once when a run goes on past warn_after, then cancels it with
// ErrTimeout when its timeout passes. A fire meant for an earlier run of
// the worker finds nothing due and sets the timer again for the run going
// on, or leaves it unset when none is.
func (w *worker) fire() {
	w.mu.Lock()
	r := w.cur
	w.due = time.Time{}
	if r == nil {
		w.mu.Unlock()
		return
	}
	warnAfter, timeout := r.ts.t.WarnAfter, r.ts.t.Timeout
	d := time.Since(r.began)
	warn, timedOut, next := false, d >= timeout, time.Duration(0)
	switch {
	case timedOut:
	case !r.warned && d >= warnAfter:
		warn, r.warned, next = true, true, timeout-d
	case !r.warned:
		next = warnAfter - d
	default:
		next = timeout - d
	}
	if next > 0 {
		w.due = time.Now().Add(next)
		w.timer.Reset(next)
	}
	w.mu.Unlock()
	if timedOut {
		r.l.Cancel(ErrTimeout)
	}
	if warn {
		r.log.Warn("run still going", "running_for", warnAfter.String(), "timeout", timeout.String())
	}
}
