package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/tasks"
)

// Grace is how long a stopped exec run has between SIGTERM and SIGKILL:
// half the lease's safety margin (at most 10s), so that a run stopped at the
// end of its trust window is dead before the lease can expire.
func Grace(ttl time.Duration) time.Duration { return min(10*time.Second, lease.Margin(ttl)/2) }

// start runs l's run on a goroutine of its own; the caller holds a slot of
// ts, which the run gives back.
func (s *Scheduler) start(ts *taskState, l *lease.Lease) {
	s.runs.Add(1)
	s.metrics.active(s.active.Add(1))
	s.workers.do(func() {
		defer s.runs.Done()
		defer func() { s.metrics.active(s.active.Add(-1)) }()
		defer func() { <-ts.slots }()
		s.execute(ts, l)
	})
}

// workerIdle is how long a goroutine that ran a run waits for the next one
// before it exits: longer than the usual time between ticks.
const workerIdle = 2 * time.Minute

// workers reuses the goroutines runs end on. A run's goroutine grows its
// stack (a release goes deep into go-redis); a new goroutine per run grew
// it again for every run, a tenth of the daemon's CPU in a 100,000-entity
// tick (README, "Speed").
// Idle workers exit once the scheduler's loops stop (Shutdown).
type workers struct {
	idle chan func()
	quit <-chan struct{}
}

// do runs f on an idle worker, or on a new one if none is idle.
func (w *workers) do(f func()) {
	select {
	case w.idle <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-w.idle:
		case <-t.C:
			return
		case <-w.quit:
			return
		}
	}
}

// execute is one run's life: the task's action under l, stopped by the
// lease, the task's timeout or the shutdown; then the release that records
// the outcome and, in the same step, asks for what comes next.
func (s *Scheduler) execute(ts *taskState, l *lease.Lease) {
	t := ts.t
	log := slog.New(&runHandler{inner: s.log.Handler(), task: t.Name, entity: l.Entity, tick: ts.tickString(l.Tick),
		fence: l.Fence, reason: string(l.Reason)})
	ctx, stop := s.runContext(t, l, log)
	defer stop()
	started := s.clock.Now()
	if l.Reason == lease.ReasonTick {
		s.metrics.lag(t.Name, started.Sub(l.Tick))
	}
	// One line per run at info, at its end: a tick of 100,000 entities
	// writes 100,000 lines, not twice that (README, "Logs").
	log.Debug("run started", "attempt", l.Attempt)
	ev := Event{Task: t.Name, Entity: l.Entity, Tick: l.Tick, Reason: l.Reason, Fence: l.Fence}
	s.observe(withKind(ev, EventRunStarted))
	res, err := ts.action.Do(ctx, tasks.Run{Task: t.Name, Entity: l.Entity, Tick: l.Tick, Fence: l.Fence,
		Reason: l.Reason, Attempt: l.Attempt, Logger: log, Check: l.Check})
	ended := s.clock.Now()
	outcome := outcomeOf(res, err, context.Cause(ctx))
	next := s.nextFor(t, l, outcome)
	// A run that never began (its lease was no longer trusted when it was to
	// start: the replica was frozen or slowed past the trust window) is
	// handed over whole, like one interrupted by shutdown: its tick is
	// recorded as started, so only a hand-over gets it done.
	handOver := outcome == lease.OutcomeCanceled || errors.Is(err, tasks.ErrNotStarted)
	if handOver {
		next = &lease.Next{Reason: lease.ReasonRetry, Attempt: l.Attempt, HandOver: true}
	}
	s.metrics.run(t.Name, l.Reason, outcome, ended.Sub(started))
	if next != nil && next.Reason == lease.ReasonRetry && !handOver {
		s.metrics.retry(t.Name)
	}
	// Not under the run's context, which may be cancelled: a release
	// bounds itself (lease.ReleaseTimeout).
	_, rerr := l.Release(context.Background(), lease.Finished{Outcome: outcome, Started: started, Ended: ended}, next)
	logEnd(log, outcome, ended.Sub(started), err, next)
	if rerr != nil && outcome != lease.OutcomeLeaseLost {
		s.logReleaseFailed(log, l, rerr)
	}
	if rerr != nil && next != nil { // keep the request: another replica must carry it out
		s.enqueueRetrying(t, l, *next)
	}
	ev.Outcome, ev.Err = outcome, errors.Join(err, rerr)
	s.observe(withKind(ev, EventRunEnded))
}

func withKind(e Event, k EventKind) Event {
	e.Kind = k
	return e
}

// runContext is the context of l's run: the lease's own, cancelled when the
// lease is lost or untrusted, and by the run's timer (ErrTimeout) and the
// shutdown (ErrShutdown) through Lease.Cancel; its Deadline is the
// timeout's end. The timer also warns once after warn_after. A fan-out
// starts 100,000 runs a tick: no child context, one timer.
func (s *Scheduler) runContext(t Task, l *lease.Lease, log *slog.Logger) (context.Context, func()) {
	stopAbort := context.AfterFunc(s.abort, func() { l.Cancel(context.Cause(s.abort)) })
	rt := &runTimer{l: l, log: log, warnAfter: t.WarnAfter, timeout: t.Timeout}
	first := rt.timeout
	if rt.warnAfter <= 0 || rt.warnAfter >= rt.timeout {
		rt.warned.Store(true)
	} else {
		first = rt.warnAfter
	}
	rt.mu.Lock() // fire waits until rt.t is set
	rt.t = time.AfterFunc(first, rt.fire)
	rt.mu.Unlock()
	return deadlineCtx{l.Context(), time.Now().Add(t.Timeout)}, func() {
		rt.stop()
		stopAbort()
	}
}

// runTimer warns once when a run goes on past warn_after, then cancels it
// with ErrTimeout when its timeout passes.
type runTimer struct {
	l                  *lease.Lease
	log                *slog.Logger
	warnAfter, timeout time.Duration

	mu      sync.Mutex
	t       *time.Timer
	warned  atomic.Bool
	stopped bool
}

func (r *runTimer) fire() {
	if r.warned.Swap(true) {
		r.l.Cancel(ErrTimeout)
		return
	}
	r.log.Warn("run still going", "running_for", r.warnAfter, "timeout", r.timeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.t.Reset(r.timeout - r.warnAfter)
	}
}

func (r *runTimer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.t.Stop()
}

// deadlineCtx reports a deadline that its context enforces by other means
// (runContext's timer). context.Cause and derived contexts see through it
// to the cancelCtx it wraps.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// outcomeOf says how a run ended, from its action's answer and the cause of
// its context's cancellation.
func outcomeOf(res tasks.Result, err, cause error) lease.Outcome {
	switch {
	case err == nil && res == tasks.Reschedule:
		return lease.OutcomeReschedule
	case err == nil:
		return lease.OutcomeDone
	case errors.Is(cause, ErrTimeout):
		return lease.OutcomeTimeout
	case errors.Is(cause, lease.ErrLost), errors.Is(cause, lease.ErrUntrusted):
		return lease.OutcomeLeaseLost
	case errors.Is(cause, ErrShutdown):
		return lease.OutcomeCanceled
	}
	return lease.OutcomeFailed
}

// logEnd logs a run's end: at info when it did its work, warn otherwise.
func logEnd(log *slog.Logger, outcome lease.Outcome, d time.Duration, err error, next *lease.Next) {
	lvl := slog.LevelWarn
	if outcome == lease.OutcomeDone || outcome == lease.OutcomeReschedule {
		lvl = slog.LevelInfo
	}
	if !log.Enabled(context.Background(), lvl) {
		return
	}
	attrs := make([]slog.Attr, 2, 6)
	attrs[0], attrs[1] = slog.String(KeyOutcome, string(outcome)), slog.String(KeyDuration, d.Round(time.Millisecond).String())
	if err != nil {
		attrs = append(attrs, slog.String(KeyError, err.Error()))
	}
	if next != nil {
		attrs = append(attrs, slog.String("next", string(next.Reason)), slog.String("next_in", next.Delay.String()))
	}
	log.LogAttrs(context.Background(), lvl, "run ended", attrs...)
}

// logReleaseFailed says why a release failed. A lease no longer held was
// taken away while the run went on, before a renewal could notice: by an
// operator's unlock (recorded as the entity's last run, with who did it),
// or by its expiry.
func (s *Scheduler) logReleaseFailed(log *slog.Logger, l *lease.Lease, err error) {
	if !errors.Is(err, lease.ErrNotHeld) {
		log.Warn("release failed", KeyError, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lease.ReleaseTimeout)
	defer cancel()
	st, serr := s.store.Entity(ctx, l.Task, l.Entity)
	if serr == nil && st.Last != nil && st.Last.Outcome == lease.OutcomeUnlocked && st.Last.Fence == l.Fence {
		log.Warn("the lease was force-released during the run (tickd unlock); the run's outcome is not recorded",
			"unlocked_by", st.Last.Replica, "unlocked_at", st.Last.Ended.UTC().Format(time.RFC3339))
		return
	}
	log.Warn("the lease expired during the run (not renewed in time); the run's outcome is not recorded", KeyError, err)
}

// nextFor decides what comes after a run.
func (s *Scheduler) nextFor(t Task, l *lease.Lease, outcome lease.Outcome) *lease.Next {
	switch outcome {
	case lease.OutcomeReschedule:
		n := 1
		if l.Reason == lease.ReasonReschedule {
			n = l.Attempt + 1
		}
		if n > t.MaxReschedules {
			s.log.Warn("max_reschedules reached: waiting for the next tick", KeyTask, t.Name, KeyEntity, l.Entity, "max_reschedules", t.MaxReschedules)
			s.observe(Event{Kind: EventRescheduleLimit, Task: t.Name, Entity: l.Entity, Tick: l.Tick, Reason: l.Reason, Fence: l.Fence})
			return nil
		}
		return &lease.Next{Reason: lease.ReasonReschedule, Delay: t.RescheduleDelay, Attempt: n}
	case lease.OutcomeFailed, lease.OutcomeTimeout:
		n := 1
		if l.Reason == lease.ReasonRetry {
			n = l.Attempt + 1
		}
		if n > t.Retries {
			return nil
		}
		return &lease.Next{Reason: lease.ReasonRetry, Delay: Backoff(n), Attempt: n}
	}
	return nil
}

// Backoff is the delay before retry n (1, 2, …): exponential from 1s,
// capped at 5m, with ±20% jitter.
func Backoff(n int) time.Duration {
	d := time.Second << min(n-1, 9)
	d = min(d, 5*time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// enqueueRetrying stores a request whose release failed (Redis down),
// retrying until Redis answers or the process stops.
func (s *Scheduler) enqueueRetrying(t Task, l *lease.Lease, n lease.Next) {
	d := lease.Due{Task: t.Name, Entity: l.Entity, Reason: n.Reason, Attempt: n.Attempt, Tick: l.Tick}
	if n.HandOver {
		d.Requests = l.Requests
	}
	backoff := 200 * time.Millisecond
	deadline := time.Now().Add(max(t.LeaseTTL, 30*time.Second))
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.store.Enqueue(ctx, d, n.Delay)
		cancel()
		if err == nil {
			return
		}
		s.storeFailed("enqueue", "enqueue", "cannot store a follow-up request; retrying", Event{Task: t.Name, Tick: l.Tick}, err)
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
	s.log.Error("follow-up request lost: Redis unreachable", KeyTask, t.Name, KeyEntity, l.Entity, KeyReason, string(n.Reason))
}
