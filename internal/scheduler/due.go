package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
)

// publishDueDepth publishes how many requests are pending (the due set's
// size); the metrics loop calls it every PausePoll.
func (s *Scheduler) publishDueDepth(ctx context.Context) {
	if n, err := s.store.Fleet().DueCount(ctx); err == nil {
		s.metrics.Due(n)
	}
}

// dueVisibility is how long a taken due entry stays hidden before it comes
// back: it only has to cover the moment between taking it and acquiring.
const dueVisibility = 30 * time.Second

// unknownTask deals with a due run for a task this replica's config does
// not have. During a config rollout another replica may have it: the entry
// is left for that one. Only when no replica announces the task is the
// entry dropped.
func (s *Scheduler) unknownTask(ctx context.Context, d driver.Due) {
	ev := Event{Task: d.Task, Entity: d.Entity, Reason: d.Reason, Tick: d.Tick}
	known, err := s.store.Fleet().Known(ctx, d.Task)
	if err != nil || known {
		if err != nil {
			s.storeFailed("announce", "known", "cannot read which replicas run which tasks", Event{Task: d.Task}, err)
		}
		s.logLimited("unknown:"+d.Task, "due run for a task not in this replica's config: left for a replica that has it",
			logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.KeyReason, d.Reason)
		s.store.Enqueue(ctx, d, time.Second) //nolint:errcheck // if this fails, visibility brings it back
		s.observe(withKind(ev, EventDueDeferred))
		return
	}
	s.log.Warn("due run for a task no replica runs: dropped", logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.KeyReason, d.Reason)
	s.store.Ack(ctx, d) //nolint:errcheck // it comes back if this fails
	s.observe(withKind(ev, EventDueDropped))
}

// announce tells the other replicas which tasks this one runs; the
// announce loop repeats it every PausePoll, valid for a few of those.
func (s *Scheduler) announce(ctx context.Context) {
	s.mu.Lock()
	names := make([]string, 0, len(s.tasks))
	infos := make([]driver.TaskInfo, 0, len(s.tasks))
	for name, ts := range s.tasks {
		names = append(names, name)
		infos = append(infos, leaseconf.TaskInfo(&ts.t))
	}
	s.mu.Unlock()
	sort.Strings(names)
	s.register(ctx, infos)
	err := s.store.Fleet().Announce(ctx, names, max(10*time.Second, 5*s.pausePoll))
	var dup *driver.DuplicateReplicaError
	switch {
	case errors.As(err, &dup):
		s.logLimit.Log(s.log, slog.LevelWarn, "duplicate-replica", "another tickd process uses this replica_id: their leases and records cannot be told apart; give each replica its own",
			"other_host", dup.Host, "other_since", dup.Since.UTC().Format(time.RFC3339))
		s.observe(Event{Kind: EventDuplicateReplica, Err: err})
	case err != nil && ctx.Err() == nil:
		s.storeFailed("announce", "announce", "cannot announce this replica's tasks", Event{}, err)
	}
	if left := s.store.Quarantine(); left > 0 {
		s.quarantined(left) // found by the store's loss watch, or by a grant
	}
}

// registerEvery is how often a replica tells the task registry again that
// it runs its tasks, when they have not changed.
const registerEvery = 5 * time.Minute

// register tells the task registry which tasks this replica runs, when
// they changed or registerEvery passed (the announce loop's).
func (s *Scheduler) register(ctx context.Context, infos []driver.TaskInfo) {
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	key := fmt.Sprint(infos)
	if key == s.registered && time.Since(s.registeredAt) < registerEvery {
		return
	}
	if err := s.store.Fleet().RegisterTasks(ctx, infos); err != nil {
		if ctx.Err() == nil {
			s.storeFailed("announce", "register", "cannot record this replica's tasks in the task registry", Event{}, err)
		}
		return
	}
	s.registered, s.registeredAt = key, time.Now()
}

// takeDue carries out durable requests: reschedules, retries, triggers and
// follow-ups, from this replica or any other; the due loop calls it every
// DuePoll, for as many as there are free run slots. While no slot is free
// (late fan-outs take each one the moment it frees), it still takes one
// entry a second, which waits in line for its task's next slot (waitSlot):
// a due run gets a slot within a bounded time under backlog.
func (s *Scheduler) takeDue(ctx context.Context) {
	s.mu.Lock()
	free := 0
	for _, ts := range s.tasks {
		if !ts.paused.Load() {
			free += cap(ts.slots) - len(ts.slots)
		}
	}
	s.mu.Unlock()
	limit := min(free, 64)
	if free == 0 {
		now := s.clock.Now()
		if s.dueWaiting.Load() >= maxDueWaiting || now.Sub(s.lastStarvedTake) < time.Second {
			return
		}
		s.lastStarvedTake, limit = now, 1
	}
	ds, err := s.store.TakeDue(ctx, limit, dueVisibility)
	if err != nil {
		if ctx.Err() == nil {
			s.storeFailed("take", "take", "cannot read due runs", Event{}, err)
		}
		return
	}
	for _, d := range ds {
		s.mu.Lock()
		ts := s.tasks[d.Task]
		s.mu.Unlock()
		switch {
		case ts == nil:
			s.unknownTask(ctx, d)
		case ts.paused.Load():
			s.giveBack(ctx, ts, d)
		default:
			select {
			case ts.slots <- struct{}{}:
				s.startDue(ctx, ts, d)
			default:
				s.dueWaiting.Add(1)
				s.loopWG.Add(1)
				go func() { defer s.loopWG.Done(); defer s.dueWaiting.Add(-1); s.waitSlot(ctx, ts, d) }()
			}
		}
	}
}

// maxDueWaiting bounds the taken due entries waiting for a slot; dueSlotWait
// bounds each one's wait, well within its visibility timeout, after which it
// is given back.
const (
	maxDueWaiting = 4
	dueSlotWait   = dueVisibility / 3
)

// waitSlot waits in line for a run slot of ts for d, behind the fan-outs
// already waiting (a channel's senders are served in order) and before
// those that ask after it.
func (s *Scheduler) waitSlot(ctx context.Context, ts *taskState, d driver.Due) {
	t := time.NewTimer(dueSlotWait)
	defer t.Stop()
	select {
	case ts.slots <- struct{}{}:
		s.startDue(ctx, ts, d)
	case <-t.C:
		s.giveBack(ctx, ts, d)
	case <-ctx.Done():
		s.giveBack(context.WithoutCancel(ctx), ts, d)
	}
}

// giveBack returns a taken due entry of ts to be taken again soon.
func (s *Scheduler) giveBack(ctx context.Context, ts *taskState, d driver.Due) {
	if err := s.requeue(ctx, ts, d); err != nil {
		s.storeFailed("enqueue", "enqueue", "cannot give back a due run", Event{Task: d.Task}, err)
	}
}

// requeue returns a taken due entry of ts to be taken again in a second.
// A tick's run that waited for a limit may have been superseded meanwhile
// (a newer tick's waiting run of the entity, or a retry, took its place):
// its tick's record counts it so, not as waiting for good.
func (s *Scheduler) requeue(ctx context.Context, ts *taskState, d driver.Due) error {
	ctx, cancel := context.WithTimeout(ctx, lease.ReleaseTimeout)
	defer cancel()
	return s.enqueueWaiting(ctx, ts, d, time.Second)
}

// enqueueWaiting enqueues due run d of ts after delay, and counts in the
// tick records what that did to a tick's waiting run: one it superseded
// (an older tick's, or d's own when it yields to another run of the
// entity), or d itself when the same tick's run waits already, queued by
// another replica (covered: counted as run elsewhere; no error).
func (s *Scheduler) enqueueWaiting(ctx context.Context, ts *taskState, d driver.Due, delay time.Duration) error {
	superseded, err := s.store.EnqueueWaiting(ctx, d, delay)
	switch {
	case errors.Is(err, driver.ErrWaiting):
		s.waitEnded(ts, d.Tick, driver.SkipAlreadyRan)
		return nil
	case err == nil && !superseded.IsZero():
		// The entity's run of an older tick waited for a limit still: this
		// tick's takes its place, and the older one is not run.
		s.log.Debug(logs.MsgAlreadyRan, logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.Tick(superseded), "superseded_by", d.Tick.UTC().Format(time.RFC3339))
		s.waitEnded(ts, superseded, history.SkipSuperseded)
	}
	return err
}

// onBusy sets what due run req does when its entity is busy. Every due
// run but a tick's or a catch-up's waits for the holder, as a follow-up: a
// reschedule, a retry, a hand-over, and an operator's trigger, whatever
// on_busy says (that is for ticks). A tick's run that waited for a limit
// does what its tick would have: queue (into the buffer), replace, or
// skip; a catch-up's skips, as its fan-out does.
func onBusy(req *driver.Request, t config.Task) {
	switch req.Reason {
	case driver.ReasonCatchUp, driver.ReasonBackfill:
		return // skipped, as its fan-out's
	case driver.ReasonTick:
	default:
		req.Queue = true
		return
	}
	switch t.OnBusy {
	case config.OnBusyQueue:
		req.Queue, req.QueueMax, req.QueueAge = true, t.QueueMax, t.CatchUp
	case config.OnBusyReplace:
		req.Replace = true
	}
}

// startDue acquires the lease of due entry d, whose run slot of ts is
// taken, and starts its run; the slot is given back if nothing starts.
func (s *Scheduler) startDue(ctx context.Context, ts *taskState, d driver.Due) {
	req := driver.Request{Task: d.Task, Entity: d.Entity, TTL: ts.t.LeaseTTL, Reason: d.Reason, From: &d, Limits: ts.t.Limits}
	onBusy(&req, ts.t)
	switch {
	case d.Reason == driver.ReasonTick, driver.ByRecord(d.Reason):
		req.Tick, req.Record = d.Tick, runRecord(&ts.t) // a tick's run that waited for a limit, or was handed over
	case d.Reason == driver.ReasonRetry && !d.Tick.IsZero():
		// A run retried after a back-off keeps its tick's place in a
		// limit's line: it waited its back-off out of the line, and would
		// come back behind every run that asked meanwhile.
		req.Since = d.Tick
	}
	if len(req.Limits) > 0 {
		// Its group is its place's in the line, if it has one; its head
		// start the task's, or a trigger's.
		req.HeadStart = ts.t.Priority
		if d.Reason == driver.ReasonTrigger {
			req.HeadStart = ts.t.TriggerPriority
		}
	}
	// An operator's trigger may come while a run of the entity that ended
	// here is still releasing its lease (its slot went back before:
	// execute): it waits for it rather than become its follow-up. The other
	// due runs (a reschedule, a retry, a follow-up, a hand-over) are written
	// by a release that landed, and are not looked up.
	if d.Reason == driver.ReasonTrigger {
		s.store.AwaitOwnRelease(ctx, d.Task, d.Entity)
	}
	l, err := s.store.Acquire(ctx, req)
	if err != nil {
		<-ts.slots
		switch {
		case errors.Is(err, lease.ErrLimited):
			s.waitForLimit(ctx, ts, d, err)
		case errors.Is(err, lease.ErrAlreadyRan):
			// A tick's run that waited for a limit, and a later tick ran.
			s.store.Ack(ctx, d) //nolint:errcheck // it comes back if this fails, and is refused again
			s.dueSkipped(ts, d, err)
		case errors.Is(err, lease.ErrBusy):
			s.dueSkipped(ts, d, err)
			if d.Reason == driver.ReasonTick && !req.Queue {
				// A tick's run that waited for a limit, skipped as its
				// tick's fan-out skips a busy entity: said as it says it.
				s.log.Debug(logs.MsgSkippedBusy, logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.Tick(d.Tick), "waited_for_a_limit", true, logs.KeyError, err)
				break
			}
			lvl := slog.LevelDebug
			if d.Reason == driver.ReasonTrigger {
				lvl = slog.LevelInfo // an operator asked: say where the run went
			}
			s.log.Log(ctx, lvl, "due run found the entity busy: it runs after the holder", logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.KeyReason, d.Reason, "follow_up", req.Queue, logs.KeyError, err)
		case errors.Is(err, driver.ErrResharding):
			s.log.Debug("due run waits for a reshard to end", logs.KeyTask, d.Task, logs.KeyEntity, d.Entity, logs.KeyReason, d.Reason)
			s.requeue(ctx, ts, d) //nolint:errcheck // if this fails too, visibility brings it back
		case errors.Is(err, driver.ErrNotAcknowledged):
			// The store handed the entry back; OnAcks logs why.
		default:
			// Redis trouble or quarantine: give the entry back to be taken
			// again soon, rather than waiting out its visibility timeout.
			var qe *lease.QuarantineError
			if errors.As(err, &qe) {
				s.quarantined(qe.Left)
			} else {
				s.storeFailed("acquire", "acquire-due", "cannot acquire lease for a due run; retrying", Event{Task: d.Task}, err)
			}
			s.requeue(ctx, ts, d) //nolint:errcheck // if this fails too, visibility brings it back
		}
		return
	}
	tl := s.waitedTally(ts, d)
	var waited time.Duration
	if d.Reason == driver.ReasonTick { // a tick's run that waited for a limit
		waited = limitWait(tl, d.Tick, l.Acquired)
	}
	if l.Tick.IsZero() {
		l.Tick = d.At
	}
	s.start(ts, l, tl, waited, nil)
}

// limitWait is how long a run of tick T that waited for a limit waited,
// given its grant at acquired: from the tick's first run here (when the
// fan-out met the limit; a catch-up tick's fan-out is long after its
// tick), else from the tick.
func limitWait(tl *tally, T, acquired time.Time) time.Duration {
	from := T
	if first := tl.firstStart.Load(); first >= 0 {
		from = T.Add(time.Duration(first))
	}
	return max(acquired.Sub(from), 0)
}
