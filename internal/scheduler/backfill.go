package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/lease/driver"
)

// An operator's backfill (tickd backfill) is a record in the store
// (driver.Backfill): the range, and its progress. Every replica reads the
// records every backfillPoll; one that runs the task takes the holder's
// place of a backfill no one holds, and fans its ticks out one after
// another, oldest first, from the tick after its cursor, with
// driver.ReasonBackfill: each entity's run is granted only when the run
// record says it has not run its tick. Its holder saves the progress
// after each tick, and at least every backfillHold/3; a save refused (a
// cancel, or another holder after a hold that passed) stops it. So a
// backfill goes on where it stopped when its replica is killed, on
// whichever replica takes it next, and runs no (entity, tick) twice.
const (
	backfillPoll = time.Second
	backfillHold = 15 * time.Second
	// BackfillRecord is how long a backfill's runs keep the run record
	// of their ticks, at the least (a task's run_record may be longer): a
	// backfill of the range within it runs none of them again; past it,
	// none of the range's ticks is known, and none runs.
	BackfillRecord = 90 * 24 * time.Hour
	// yieldAhead is how long before a live tick a backfill stops asking
	// for leases, so that the tick's acquires find Redis idle; yieldLive,
	// how long after the tick's fan-out began it waits at most.
	yieldAhead = 50 * time.Millisecond
	yieldLive  = time.Second
)

// errBackfillStopped stops a backfill whose save was refused.
var errBackfillStopped = errors.New("backfill cancelled, or taken by another replica")

// backfiller runs this replica's backfills.
type backfiller struct {
	s       *Scheduler
	mu      sync.Mutex
	running map[string]bool // by id
	// runs counts the backfills this process took: each one's parts of
	// its ticks' records are its own (a backfill taken again, after a
	// Redis rollback took its progress back, never writes over what it
	// recorded before).
	runs atomic.Int64
}

// poll reads the backfills and takes those to run that no one holds.
func (b *backfiller) poll(ctx context.Context) {
	s := b.s
	fleet := s.store.Fleet()
	bs, err := fleet.Backfills(ctx)
	if err != nil {
		s.logLimited("backfills", "cannot read the backfills; will retry", logs.KeyError, err)
		return
	}
	for _, bf := range bs {
		// One held elsewhere is asked for too: its Until is by the
		// store's clock, which the save compares by.
		ts := taskStateOf(s, bf.Task)
		if !bf.Ended.IsZero() || bf.Cancelled != "" || ts == nil || ts.zones != nil && !ts.zones.scanned.Load() {
			continue // a task with timezone_from: once its zones are known, its ticks are theirs
		}
		b.mu.Lock()
		running := b.running[bf.ID]
		b.mu.Unlock()
		if running {
			continue
		}
		if ok, err := fleet.SaveBackfill(ctx, bf, backfillHold); err != nil || !ok {
			continue
		}
		b.mu.Lock()
		b.running[bf.ID] = true
		b.mu.Unlock()
		s.loopWG.Add(1)
		go func() {
			defer s.loopWG.Done()
			b.run(bf)
			b.mu.Lock()
			delete(b.running, bf.ID)
			b.mu.Unlock()
		}()
	}
}

// taskStateOf is s's newest state of task, nil when the config has none.
func taskStateOf(s *Scheduler, task string) *taskState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[task]
}

// backfillRun is one backfill being run here: its record, saved as it
// goes.
type backfillRun struct {
	b    *backfiller
	mu   sync.Mutex
	bf   driver.Backfill
	stop context.CancelCauseFunc
	// going are the tallies of its ticks whose runs may still go on
	// (countEnded counts their failures once they ended).
	going []*tally
	// part names it in its ticks' records (catchUp.backfill), with the
	// number of each fan-out of it (fanOuts) after it.
	part    string
	fanOuts atomic.Int64
}

// failedOutcomes are the outcomes a backfill counts as failed.
var failedOutcomes = []int{outcomeIndex(driver.OutcomeFailed), outcomeIndex(driver.OutcomeTimeout)}

// countEnded adds the failures of the ticks whose runs all ended to the
// backfill's, and forgets them; r.mu is held.
func (r *backfillRun) countEnded() {
	r.going = slices.DeleteFunc(r.going, func(tl *tally) bool {
		if tl.pending.Load() > 0 {
			return false
		}
		for _, i := range failedOutcomes {
			r.bf.Failed += tl.outcomes[i].Load()
		}
		return true
	})
}

// save saves the progress, holding the backfill for backfillHold more (0
// once it ended); a save refused stops the run.
func (r *backfillRun) save(ctx context.Context, hold time.Duration) {
	r.mu.Lock()
	r.countEnded()
	bf := r.bf
	r.mu.Unlock()
	ok, err := r.b.s.store.Fleet().SaveBackfill(ctx, bf, hold)
	switch {
	case err != nil:
		r.b.s.logLimited("backfill:"+bf.ID, "cannot save a backfill's progress; will retry", logs.KeyTask, bf.Task, "backfill", bf.ID, logs.KeyError, err)
	case !ok:
		r.stop(errBackfillStopped)
	}
}

// run runs bf's ticks after its cursor, saving its progress after each.
func (b *backfiller) run(bf driver.Backfill) {
	s := b.s
	ctx, stop := context.WithCancelCause(s.loopCtx)
	defer stop(nil)
	r := &backfillRun{b: b, bf: bf, stop: stop, part: bf.ID + "." + strconv.FormatInt(b.runs.Add(1), 10)}
	// The hold, kept while a tick's fan-out goes on.
	go poll(ctx, backfillHold/3, func(ctx context.Context) { r.save(ctx, backfillHold) })
	s.log.Info("backfill resumed", logs.KeyTask, bf.Task, "backfill", bf.ID, "ticks_done", bf.Ticks, "from", bf.From.UTC().Format(time.RFC3339), "to", bf.To.UTC().Format(time.RFC3339))
	for _, T := range backfillTicks(taskStateOf(s, bf.Task), bf) {
		if !b.tick(ctx, r, T) {
			s.log.Info("backfill stopped", logs.KeyTask, bf.Task, "backfill", bf.ID, logs.KeyError, context.Cause(ctx))
			return
		}
	}
	// It ends once its runs have: a -wait that returns finds them done.
	r.mu.Lock()
	going := slices.Clone(r.going)
	r.mu.Unlock()
	for _, tl := range going {
		for tl.pending.Load() > 0 && ctx.Err() == nil {
			retry.Wait(ctx.Done(), backfillRoomPoll)
		}
	}
	r.mu.Lock()
	r.bf.Ended = s.clock.Now()
	r.countEnded()
	r.mu.Unlock()
	r.save(ctx, 0)
	if ctx.Err() != nil {
		return
	}
	bf = r.bf
	detail := fmt.Sprintf("%s ended: %d ticks, %d runs, %d run before, %d left busy", bf.ID, bf.Ticks, bf.Ran, bf.Skipped, bf.Busy)
	if ts := taskStateOf(s, bf.Task); ts != nil {
		err := s.store.Fleet().RecordAction(ctx, driver.Action{Task: bf.Task, At: bf.Ended, By: s.replica, What: driver.ActionBackfill, Detail: detail}, leaseconf.Retention(&ts.t))
		if err != nil {
			s.log.Warn("cannot record a backfill's end in the history", logs.KeyTask, bf.Task, "backfill", bf.ID, logs.KeyError, err)
		}
	}
	s.log.Info("backfill ended", logs.KeyTask, bf.Task, "backfill", bf.ID, "ticks", bf.Ticks, "ran", bf.Ran, "skipped", bf.Skipped, "busy", bf.Busy)
}

// tick fans out tick T of r's backfill, once the task is not paused, and
// saves its progress; false when the backfill stops (its task gone from
// the config, a cancel, shutdown).
//
// A fan-out a pause stopped is done again once it is resumed: each one
// has a part of its own in the tick's record (part.N), and the runs an
// earlier one started count as started, not as found run before.
func (b *backfiller) tick(ctx context.Context, r *backfillRun, T time.Time) bool {
	s := b.s
	started := 0 // by this tick's fan-outs a pause stopped
	for ctx.Err() == nil {
		ts := taskStateOf(s, r.bf.Task)
		if ts == nil {
			return false
		}
		if ts.paused.Load() {
			retry.Wait(ctx.Done(), s.pausePoll)
			continue
		}
		part := r.part + "." + strconv.FormatInt(r.fanOuts.Add(1), 10)
		c := catchUp{T: T, reason: driver.ReasonBackfill, only: r.bf.Entities, backfill: part}
		if r.bf.Only != driver.BackfillMissing {
			c.recordOf = r.bf.ID // each entity again, once in this backfill
		}
		if r.bf.Only == driver.BackfillFailed {
			ids, err := failedAt(ctx, s, ts, r.bf, T)
			if err != nil {
				s.logLimited("backfill:"+r.bf.ID, "cannot read which runs of a tick failed; will retry", logs.KeyTask, r.bf.Task, "backfill", r.bf.ID, logs.Tick(T), logs.KeyError, err)
				retry.Wait(ctx.Done(), backfillPoll)
				continue
			}
			if len(ids) == 0 { // none failed: nothing to fan out
				r.mu.Lock()
				r.bf.Cursor, r.bf.Ticks = T, r.bf.Ticks+1
				r.mu.Unlock()
				r.save(ctx, backfillHold)
				return ctx.Err() == nil
			}
			c.only = ids
		}
		n, tl := s.fanOut(ctx, ts, c)
		r.mu.Lock()
		r.going = append(r.going, tl)
		r.bf.Ran += int64(n.Started)
		r.mu.Unlock()
		if n.Paused {
			started += n.Started
			continue // the tick again, once resumed
		}
		if ctx.Err() != nil || n.Stopped || n.Removed {
			return false
		}
		r.mu.Lock()
		r.bf.Cursor, r.bf.Ticks = T, r.bf.Ticks+1
		r.bf.Skipped += int64(max(n.AlreadyRan+n.Superseded-started, 0))
		r.bf.Busy += int64(n.Busy + n.Errors + n.Quarantined + n.Limited)
		r.mu.Unlock()
		r.save(ctx, backfillHold)
		return ctx.Err() == nil
	}
	return false
}

// backfillTicks are bf's ticks still to run: of its range, after its
// cursor, not Unknown, oldest first, by the schedule of ts (none for nil:
// the task is gone from the config).
func backfillTicks(ts *taskState, bf driver.Backfill) []time.Time {
	if ts == nil {
		return nil
	}
	from := bf.From.Add(-time.Nanosecond)
	if bf.Cursor.After(from) {
		from = bf.Cursor
	}
	var out []time.Time
	for at := ts.sched.Next(from); !at.IsZero() && !at.After(bf.To); at = ts.sched.Next(at) {
		if !slices.ContainsFunc(bf.Unknown, at.Equal) {
			out = append(out, at)
		}
	}
	return out
}

// liveSoon says whether a live tick is due within yieldAhead, or a live
// tick's fan-out goes on that began within yieldLive (one that waits long
// for limits or busy entities does not hold a backfill up for good).
func liveSoon(s *Scheduler) bool {
	now := s.clock.Now()
	if s.liveFanOuts.Load() > 0 && now.UnixNano()-s.liveSince.Load() < int64(yieldLive) {
		return true
	}
	soon := now.Add(yieldAhead).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ts := range s.tasks {
		if next := ts.nextTick.Load(); next > 0 && next <= soon {
			return true
		}
	}
	return false
}

// backfillRoom waits, before a backfill's fan-out takes a run slot, while
// a live tick's fan-out goes on or is due (liveSoon), or the backfill's
// runs hold half the task's slots: a backfill takes the room live ticks
// leave. Its batch is sent first: it holds slots, and Redis's time.
func (f *fanOut) backfillRoom() {
	half := max(cap(f.ts.slots)/2, 1)
	if f.reason != driver.ReasonBackfill || !liveSoon(f.s) && len(f.ts.slots) < half {
		return
	}
	f.flush()
	for f.ctx.Err() == nil && (liveSoon(f.s) || len(f.ts.slots) >= half) {
		retry.Wait(f.ctx.Done(), backfillRoomPoll)
	}
}

// backfillRoomPoll is how often a backfill waiting for room looks again.
const backfillRoomPoll = 5 * time.Millisecond

// markFailed keeps in the tick's run record that l's run of its tick
// failed (or timed out) with no retry to follow, or that a later run of
// it (a retry's, a catch-up's, a backfill's) succeeded: a backfill of the
// failed runs (-only failed) runs the first, not the second. Only for a
// task that keeps a run record, or a backfill's run; only those runs cost
// a Redis call, on a goroutine of its own.
func markFailed(s *Scheduler, ts *taskState, l *lease.Lease, outcome driver.Outcome, next *driver.Next) {
	record := recordFor(&ts.t, l.Reason)
	failed := (outcome == driver.OutcomeFailed || outcome == driver.OutcomeTimeout) && next == nil
	if record == 0 || l.Tick.IsZero() || !failed && (outcome != driver.OutcomeDone || l.Reason == driver.ReasonTick) {
		return
	}
	task := ts.t.Name
	s.runs.Add(1) // within the run's own count: a stop waits for it
	go func() {
		defer s.runs.Done()
		ctx, cancel := context.WithTimeout(context.Background(), lease.ReleaseTimeout)
		defer cancel()
		if err := s.store.Fleet().RunRecords().MarkFailed(ctx, task, l.Tick, l.Entity, failed, record); err != nil {
			s.logLimited("mark-failed", "cannot keep in the run record which runs failed; a backfill of the failed runs misses this one", logs.KeyTask, task, logs.KeyEntity, l.Entity, logs.Tick(l.Tick), logs.KeyError, err)
		}
	}()
}

// failedAt are the entities of bf (of its task's source, when it names
// none) whose run of tick T failed, by the run record (driver.TickRan.Failed).
func failedAt(ctx context.Context, s *Scheduler, ts *taskState, bf driver.Backfill, T time.Time) ([]string, error) {
	ids := bf.Entities
	if len(ids) == 0 {
		if err := ts.source.Each(ctx, func(id string) error { ids = append(ids, id); return nil }); err != nil {
			return nil, err
		}
	}
	rec, err := s.store.Fleet().RunRecords().Read(ctx, bf.Task, []time.Time{T}, ids)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, failed := range rec[0].Failed {
		if failed {
			out = append(out, ids[i])
		}
	}
	return out, nil
}

// recordFor is how long a run of t for reason keeps its tick's run record
// (driver.Request.Record): the task's (runRecord), and for a backfill's
// run BackfillRecord at the least. Its grant and its failure's mark keep
// it alike.
func recordFor(t *config.Task, reason driver.Reason) time.Duration {
	if reason == driver.ReasonBackfill {
		return max(runRecord(t), BackfillRecord)
	}
	return runRecord(t)
}

// heldUntil sets how long the entities a catch-up or a backfill finds
// busy or limited are asked again (retryHeld), and a backfill's entities.
func (f *fanOut) heldUntil(c catchUp) {
	f.until = f.T.Add(f.ts.t.CatchUp) // a catch-up's, while its tick is in the window
	f.limitUntil = f.until
	if f.reason != driver.ReasonBackfill {
		return
	}
	f.limitUntil = time.Time{} // a backfill's runs wait for a limit as long as it goes on
	f.recordOf = c.recordOf
	f.until = f.s.clock.Now().Add(max(2*f.ts.t.LeaseTTL, time.Minute))
	f.only = make(map[string]bool, len(c.only))
	for _, id := range c.only {
		f.only[id] = true
	}
}
