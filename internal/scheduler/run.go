package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// Grace is how long a stopped exec run has between SIGTERM and SIGKILL:
// half the lease's safety margin (at most 10s), so that a run stopped at the
// end of its trust window is dead before the lease can expire.
func Grace(ttl time.Duration) time.Duration { return min(10*time.Second, lease.Margin(ttl)/2) }

// start runs l's run on a worker; the caller holds a slot of ts, which the
// run gives back.
func (s *Scheduler) start(ts *taskState, l *lease.Lease, tl *tally, limitWait time.Duration, attrs tasks.Attributes) {
	s.runs.Add(1)
	s.metrics.Active(s.active.Add(1))
	if tl != nil {
		tl.pending.Add(1)
	}
	s.workers.do(job{ts, l, tl, limitWait, attrs})
}

// job is a run to start: l's, for ts's task, its tick's tally, its wait,
// its entity's attributes.
type job struct {
	ts        *taskState
	l         *lease.Lease
	tl        *tally
	limitWait time.Duration
	attrs     tasks.Attributes
}

// running is one run's state, in one allocation: its log handler and
// logger (tasks.Run.Logger), its context, and its timer's deadlines. A
// fan-out starts 100,000 runs a tick.
type running struct {
	s   *Scheduler
	ts  *taskState
	h   runHandler
	log slog.Logger
	ctx deadlineCtx
	l   *lease.Lease
	// What the run's end (AfterRelease) says and does.
	outcome driver.Outcome
	took    time.Duration
	err     error
	next    *driver.Next
	tl      *tally
	ended   time.Time

	// The timer's: the task's warn_after and timeout count from began, the
	// run's start by the monotonic clock.
	began  time.Time
	warned bool // under worker.mu
	// The overrun watch's (under worker.mu): when the run was stopped (by
	// the shutdown's abort, to the instant; else when the watch first saw
	// its context cancelled, at most overrunEvery later), and whether it
	// reported the run.
	stoppedAt time.Time
	overran   bool
	// slotBack: the run gave its slot back when its handler returned
	// (execute), not at its end (done).
	slotBack bool
}

// execute is one run's life, on worker w: the task's action under l,
// stopped by the lease, the task's timeout or the shutdown; then the
// release that records the outcome and, in the same step, asks for what
// comes next.
func (s *Scheduler) execute(w *worker, j job) {
	ts, l := j.ts, j.l
	t := ts.t
	r := &running{s: s, ts: ts, l: l, tl: j.tl}
	r.h = runHandler{inner: ts.runLog(s.log.Handler(), l.Tick), entity: l.Entity, fence: l.Fence, reason: string(l.Reason)}
	r.log = *slog.New(&r.h)
	// The run's context is the lease's own, cancelled when the lease is
	// lost or untrusted, and by the worker's timer (ErrTimeout) and the
	// shutdown (ErrShutdown) through Lease.Cancel; its Deadline is the
	// timeout's end.
	r.ctx.Context = l.Context()
	var span *telemetry.RunSpan
	if s.tracer != nil {
		var fo *telemetry.FanOut
		if r.tl != nil && (l.Reason == driver.ReasonTick || driver.ByRecord(l.Reason)) {
			fo = r.tl.fanOutSpan.Load()
		}
		r.ctx.Context, span = s.tracer.StartRun(r.ctx.Context, fo, telemetry.Run{Task: t.Name, Entity: l.Entity, Tick: l.Tick,
			Fence: l.Fence, Reason: l.Reason, Attempt: l.Attempt, LimitWait: j.limitWait})
	}
	started := s.clock.Now()
	w.begin(s, r, s.wall(started))
	if l.Reason == driver.ReasonTick {
		s.metrics.Lag(t.Name, started.Sub(l.Tick))
	}
	if r.tl != nil {
		r.tl.started(started.Sub(l.Tick))
	}
	// One line per run at info, at its end: a tick of 100,000 entities
	// writes 100,000 lines, not twice that (docs/operations.md, "Logs").
	r.log.Debug("run started", "attempt", l.Attempt)
	s.observe(r.event(EventRunStarted))
	res, err := ts.action.Do(&r.ctx, tasks.Run{Task: t.Name, Entity: l.Entity, Tick: l.Tick, Fence: l.Fence,
		Reason: l.Reason, Attempt: l.Attempt, Attributes: j.attrs, Logger: &r.log, Check: l.Check, Quota: quotaFor(s, t.Name, t.Limits, l.Entity)})
	w.end()
	ended := s.clock.Now()
	outcome := outcomeOf(res, err, context.Cause(&r.ctx))
	next := s.nextFor(t, l, outcome)
	if outcome == driver.OutcomeFailed {
		// Declared here: errors.As moves it to the heap, for the failed runs only.
		var be *tasks.BackoffError
		if errors.As(err, &be) {
			// Not a failure: the API asked to be left alone until then.
			outcome, next = driver.OutcomeReschedule, s.backOff(t, l, be)
		}
	}
	// A run that never began (its lease was no longer trusted when it was to
	// start: the replica was frozen or slowed past the trust window) is
	// handed over whole, like one interrupted by shutdown: its tick is
	// recorded as started, so only a hand-over gets it done.
	// A run an unlock revoked before it began is not handed over: the
	// operator asked for it not to run.
	handOver := outcome == driver.OutcomeCanceled || errors.Is(err, tasks.ErrNotStarted) && outcome != driver.OutcomeUnlocked
	if handOver {
		next = &driver.Next{Reason: driver.ReasonRetry, Attempt: l.Attempt, HandOver: true}
	}
	s.metrics.Ran(t.Name, l.Reason, outcome, ended.Sub(started))
	if next != nil && next.Reason == driver.ReasonRetry && !handOver {
		s.metrics.Retried(t.Name)
	}
	r.outcome, r.took, r.err, r.next, r.ended = outcome, ended.Sub(started), err, next, ended
	markFailed(s, ts, l, outcome, next)
	fin := driver.Finished{Outcome: outcome, Started: started, Ended: ended}
	if driver.Failed(outcome) {
		fin.Error = failureText(err, context.Cause(&r.ctx))
		s.history.failed(r.failure(started, ended, fin.Error))
	}
	telemetry.EndRun(span, outcome, fin.Error, l.Renewals())
	// The run's slot is given back once its release is queued, not once it
	// lands: that is a round trip, batched with other runs' releases, and
	// meanwhile the next runs can be granted (docs/performance.md, item 17;
	// an acquire that finds the entity busy with this release waits for it:
	// lease.Store.AwaitOwnRelease). At most concurrency runs wait on their
	// release so: a task holds at most twice its concurrency in leases.
	slotBack := ts.releasing.Add(1) <= int64(cap(ts.slots))
	if !slotBack {
		ts.releasing.Add(-1)
	}
	r.slotBack = slotBack // done reads it, maybe before ReleaseThen returns
	// Not waited for: the worker is free for the next run once the release
	// is queued (docs/performance.md); AfterRelease ends the run.
	l.ReleaseThen(fin, next, r)
	if slotBack {
		<-ts.slots
	}
}

// AfterRelease ends r's run once its lease is released: the run's log line,
// its event, and its slot given back unless execute did. A release that
// failed is dealt with on a goroutine of its own: it may wait for Redis.
func (r *running) AfterRelease(rel lease.Released, rerr error) {
	logEnd(&r.h, r.s.wall(r.ended), r.outcome, r.took, r.err, r.next)
	if !rel.Superseded.IsZero() {
		// The run it asked for took the place of a tick's waiting run.
		r.s.waitEnded(r.ts, rel.Superseded, history.SkipSuperseded)
	}
	if rerr == nil {
		r.done(nil)
		return
	}
	go func() {
		if r.outcome != driver.OutcomeLeaseLost {
			r.s.logReleaseFailed(&r.log, r.l, rerr)
		}
		if r.next != nil { // keep the request: another replica must carry it out
			r.s.enqueueRetrying(r.ts.t, r.l, *r.next)
		}
		r.done(rerr)
	}()
}

// done observes the run's end and gives its slot back, or counts its
// release landed when its slot went back at its handler's return.
func (r *running) done(rerr error) {
	s := r.s
	if s.observer != nil {
		ev := r.event(EventRunEnded)
		ev.Outcome, ev.Err = r.outcome, errors.Join(r.err, rerr)
		s.observe(ev)
	}
	if r.tl != nil {
		s.history.ended(r.tl, r.outcome, r.ended.Sub(r.l.Tick))
	}
	s.metrics.Active(s.active.Add(-1))
	if r.slotBack {
		r.ts.releasing.Add(-1)
	} else {
		<-r.ts.slots
	}
	s.runs.Done()
}

func withKind(e Event, k EventKind) Event {
	e.Kind = k
	return e
}

// event is an Event of kind k about r's run.
func (r *running) event(k EventKind) Event {
	l := r.l
	return Event{Kind: k, Task: r.ts.t.Name, Entity: l.Entity, Tick: l.Tick, Reason: l.Reason, Fence: l.Fence}
}

// deadlineCtx reports a deadline that its context enforces by other means
// (the worker's timer). context.Cause and derived contexts see through it
// to the cancelCtx it wraps.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// outcomeOf says how a run ended, from its action's answer and the cause of
// its context's cancellation.
func outcomeOf(res tasks.Result, err, cause error) driver.Outcome {
	switch {
	case err == nil && res == tasks.Reschedule:
		return driver.OutcomeReschedule
	case err == nil:
		return driver.OutcomeDone
	case errors.Is(cause, ErrTimeout):
		return driver.OutcomeTimeout
	case errors.Is(cause, lease.ErrRevoked):
		return driver.OutcomeUnlocked
	case errors.Is(cause, lease.ErrReplaced):
		return driver.OutcomeReplaced
	case errors.Is(cause, lease.ErrLost), errors.Is(cause, lease.ErrUntrusted):
		return driver.OutcomeLeaseLost
	case errors.Is(cause, ErrShutdown):
		return driver.OutcomeCanceled
	}
	return driver.OutcomeFailed
}

// failureText is a failed run's error as the history keeps it, with the
// cause of its stop (a timeout, a lost lease) when the error does not say
// it (a Go handler's "context canceled").
func failureText(err, cause error) string {
	switch {
	case err == nil && cause == nil:
		return ""
	case err == nil:
		return cause.Error()
	case cause != nil && !strings.Contains(err.Error(), cause.Error()):
		return err.Error() + " (" + cause.Error() + ")"
	}
	return err.Error()
}

// wall is t, a reading of the scheduler's clock, as wall time: t itself
// when the clock is the system's, else time.Now(). A run reads the clock
// twice, at its start and its end, and its worker's timer and its log line
// take those readings (docs/performance.md, item 15).
func (s *Scheduler) wall(t time.Time) time.Time {
	if s.sysClock {
		return t
	}
	return time.Now()
}

// logEnd logs a run's end, at info when it did its work, warn otherwise,
// with h's attributes: a record handed to the handler as it is, without a
// Logger's call-site lookup or runHandler's copy. Its time is at, the
// run's end.
func logEnd(h *runHandler, at time.Time, outcome driver.Outcome, d time.Duration, err error, next *driver.Next) {
	lvl := slog.LevelWarn
	if outcome == driver.OutcomeDone || outcome == driver.OutcomeReschedule {
		lvl = slog.LevelInfo
	}
	ctx := context.Background()
	if !h.inner.Enabled(ctx, lvl) {
		return
	}
	r := slog.NewRecord(at, lvl, logs.MsgRunEnded, 0)
	own := h.own()
	r.AddAttrs(own[:]...)
	r.AddAttrs(slog.String(logs.KeyOutcome, string(outcome)), slog.String(logs.KeyDuration, durationString(d)))
	if err != nil {
		r.AddAttrs(slog.String(logs.KeyError, err.Error()))
	}
	if next != nil {
		r.AddAttrs(slog.String("next", string(next.Reason)), slog.String("next_in", next.Delay.String()))
	}
	h.inner.Handle(ctx, r) //nolint:errcheck // a log line that cannot be written is not the run's failure
}

// durationString is d to the millisecond, as Duration.String writes it:
// "0s", without a new string, for the runs that take less than half a
// millisecond.
func durationString(d time.Duration) string {
	if d = d.Round(time.Millisecond); d == 0 {
		return "0s"
	}
	return d.String()
}

// logReleaseFailed says why a release failed. A lease no longer held was
// taken away while the run went on, before a renewal could notice: by an
// operator's unlock -force (recorded as the entity's last run, with who did
// it), or by its expiry.
func (s *Scheduler) logReleaseFailed(log *slog.Logger, l *lease.Lease, err error) {
	if !errors.Is(err, driver.ErrNotHeld) {
		log.Warn("release failed", logs.KeyError, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lease.ReleaseTimeout)
	defer cancel()
	st, serr := s.store.Fleet().Entity(ctx, l.Task, l.Entity)
	if serr == nil && st.Last != nil && st.Last.Outcome == driver.OutcomeUnlocked && st.Last.Fence == l.Fence {
		log.Warn("the lease was force-released during the run (tickd unlock); the run's outcome is not recorded",
			"unlocked_by", st.Last.By, "unlocked_at", st.Last.Ended.UTC().Format(time.RFC3339))
		return
	}
	log.Warn("the lease expired during the run (not renewed in time); the run's outcome is not recorded", logs.KeyError, err)
}

// nextFor decides what comes after a run.
func (s *Scheduler) nextFor(t config.Task, l *lease.Lease, outcome driver.Outcome) *driver.Next {
	switch outcome {
	case driver.OutcomeReschedule:
		n := 1
		if l.Reason == driver.ReasonReschedule {
			n = l.Attempt + 1
		}
		if n > t.MaxReschedules {
			s.log.Warn("max_reschedules reached: waiting for the next tick", logs.KeyTask, t.Name, logs.KeyEntity, l.Entity, "max_reschedules", t.MaxReschedules)
			s.observe(Event{Kind: EventRescheduleLimit, Task: t.Name, Entity: l.Entity, Tick: l.Tick, Reason: l.Reason, Fence: l.Fence})
			return nil
		}
		return &driver.Next{Reason: driver.ReasonReschedule, Delay: t.RescheduleDelay, Attempt: n}
	case driver.OutcomeFailed, driver.OutcomeTimeout:
		n := 1
		if l.Reason == driver.ReasonRetry {
			n = l.Attempt + 1
		}
		if n > t.Retries {
			return nil
		}
		return &driver.Next{Reason: driver.ReasonRetry, Delay: retry.Attempt(n), Attempt: n}
	}
	return nil
}

// enqueueRetrying stores a request whose release failed (Redis down),
// retrying until Redis answers, for at most max(lease_ttl, 30s), and not
// past the end of shutdown_timeout: a stop keeps its timeout, and what it
// could not store is logged.
func (s *Scheduler) enqueueRetrying(t config.Task, l *lease.Lease, n driver.Next) {
	d := driver.Due{Task: t.Name, Entity: l.Entity, Reason: n.Reason, Attempt: n.Attempt, Tick: l.Tick}
	if n.HandOver {
		d.Requests = l.Requests
	}
	backoff := retry.Backoff{First: 200 * time.Millisecond, Max: 5 * time.Second}
	deadline := time.Now().Add(max(t.LeaseTTL, 30*time.Second))
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(s.abort, 2*time.Second)
		err := s.store.Enqueue(ctx, d, n.Delay)
		cancel()
		if err == nil {
			return
		}
		if s.abort.Err() != nil {
			break
		}
		s.storeFailed("enqueue", "enqueue", "cannot store a follow-up request; retrying", Event{Task: t.Name, Tick: l.Tick}, err)
		backoff.Wait(s.abort.Done())
	}
	why := "Redis unreachable"
	if s.abort.Err() != nil {
		why = "Redis unreachable until shutdown_timeout ended"
	}
	s.log.Error("follow-up request lost: "+why, logs.KeyTask, t.Name, logs.KeyEntity, l.Entity, logs.KeyReason, string(n.Reason),
		"attempt", n.Attempt, logs.Tick(l.Tick))
}
