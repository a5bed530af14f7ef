package scheduler

import (
	"context"
	"sync"
	"time"
)

// workerIdle is how long a goroutine that ran a run waits for the next one
// before it exits: longer than the usual time between ticks.
const workerIdle = 2 * time.Minute

// workers reuses the goroutines runs go on, and each one's timer. A run's
// goroutine grows its stack; a new goroutine per run grew it again for
// every run, a tenth of the daemon's
// CPU in a 100,000-entity tick, and a timer and a shutdown hook per run
// were another tenth (docs/performance.md). Idle workers exit once the
// scheduler's loops stop (Shutdown).
type workers struct {
	s    *Scheduler
	idle chan job
	quit <-chan struct{}

	mu  sync.Mutex
	all map[*worker]struct{} // for abort
}

// worker is one goroutine of workers, and the run it is on.
type worker struct {
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

// do runs j on an idle worker, or on a new one if none is idle.
func (ws *workers) do(j job) {
	select {
	case ws.idle <- j:
	default:
		go ws.loop(j)
	}
}

func (ws *workers) loop(j job) {
	w := &worker{}
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
	var ran bool
	for {
		ws.s.execute(w, j)
		ran = true
	wait:
		select {
		case j = <-ws.idle:
		case <-idle.C:
			if !ran {
				return
			}
			ran = false
			idle.Reset(workerIdle)
			goto wait
		case <-ws.quit:
			return
		}
	}
}

// abort stops the runs going on with cause, through Lease.Cancel. A run
// that starts after it sees the scheduler's abort context cancelled
// (worker.begin).
func (ws *workers) abort(cause error) {
	ws.each(func(r *running) { r.l.Cancel(cause) })
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

// begin makes r w's current run: its timer is set for warn_after, or for
// the timeout when there is no warning to give; a shutdown that already
// aborted the runs stops it at once.
func (w *worker) begin(s *Scheduler, r *running) {
	warnAfter, timeout := r.ts.t.WarnAfter, r.ts.t.Timeout
	r.began = time.Now()
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
