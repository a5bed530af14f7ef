package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
)

// tickLoop waits for each tick of a task and fans it out. Ticks are computed
// from the previous planned tick, never from now.
func (s *Scheduler) tickLoop(ctx context.Context, ts *taskState) {
	t, sched := ts.t, ts.sched
	if ts.zones != nil && !ts.zones.scanned.Load() {
		// The zones are learned before the first tick, so that each one's
		// missed tick is caught up and none of its instants waits for a
		// fan-out to find it.
		if err := ts.zones.scan(ctx, ts.source, t.TimezoneFrom); err != nil && ctx.Err() == nil {
			s.log.Warn("cannot read the entities' zones before the first tick: each is learned at a tick that reads it", logs.KeyTask, t.Name, logs.KeyError, err)
		}
	}
	now := s.clock.Now()
	if t.CatchUp > 0 {
		// Not a tick the task's state before a reload fanned out (its fan-out
		// goes on under this one). With zones, each zone's latest missed
		// tick: one fan-out per distinct instant, of the zones it is the
		// latest of.
		cs := catchUps(ts, now)
		for _, c := range cs {
			s.log.Info("catching up the latest missed tick", logs.KeyTask, t.Name, logs.Tick(c.T))
		}
		if len(cs) > 0 && t.CatchUpRuns == config.CatchUpAll {
			cs = append(cs, olderMissed(ctx, s.store.Fleet(), s.log, ts, now, cs[0].T)...)
		}
		s.goFanOut(ts, cs...)
	}
	var found chan struct{} // a zone found: its instants may come sooner
	if ts.zones != nil {
		found = ts.zones.found
	}
	planned := now // the instant the next tick was computed from
	next := sched.Next(now)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer ts.nextTick.Store(0)
	for !next.IsZero() {
		ts.nextTick.Store(next.UnixNano())
		timer.Reset(next.Sub(s.clock.Now()))
		select {
		case <-ctx.Done():
			return
		case <-found:
			next = sched.Next(planned)
			continue
		case <-timer.C:
		}
		now = s.clock.Now()
		if now.Before(next) { // the timer fired early against an offset clock
			continue
		}
		// Woken late (a pause, a frozen process): run the latest tick due, not
		// a flood of old ones, and only if it is young enough.
		skipped := 0
		for n := sched.Next(next); !n.IsZero() && !n.After(now); n = sched.Next(n) {
			next = n
			skipped++
		}
		if skipped > 0 {
			s.log.Warn("ticks missed while the process was late", logs.KeyTask, t.Name, "skipped", skipped, logs.Tick(next))
		}
		if late := now.Sub(next); late <= t.LateLimit() {
			if !ts.paused.Load() {
				s.goFanOut(ts, catchUp{T: next})
			} else {
				s.metrics.Skipped(t.Name, "paused", 1)
				s.log.Debug("task paused: tick skipped", logs.KeyTask, t.Name, logs.Tick(next))
			}
		} else {
			s.log.Warn("tick too late to run", logs.KeyTask, t.Name, logs.Tick(next), "late", late.Round(time.Millisecond).String())
		}
		planned, next = next, sched.Next(next)
	}
}

// goFanOut fans out the ticks cs in the background, oldest first, one
// after another: each fan-out has the task's run slots to itself, as a
// tick on time has (zones' catch-ups at once made batches of a fan-out's
// share of the slots: 4 times the Redis commands a run). Shutdown waits
// for them (the tick loop that calls it is itself counted, so the count
// never touches zero). The fan-outs outlive their tick loop, which a
// reload stops: a reload's new state takes the rest over; shutdown, a
// pause or the task's removal stop them (fanOuts). A tick's zones, when
// not nil, name the zones (timezone_from) whose entities it runs: a
// catch-up's.
func (s *Scheduler) goFanOut(ts *taskState, cs ...catchUp) {
	if len(cs) == 0 {
		return
	}
	latest := slices.MaxFunc(cs, func(a, b catchUp) int { return a.T.Compare(b.T) }).T
	if latest.UnixNano() > ts.lastTick.Load() {
		ts.lastTick.Store(latest.UnixNano())
	}
	// A live tick's fan-out counts from now, not from when its goroutine
	// begins: a backfill yields to it (liveSoon).
	live := cmp.Or(cs[0].reason, driver.ReasonTick) == driver.ReasonTick
	if live {
		s.liveFanOuts.Add(1)
		s.liveSince.Store(s.clock.Now().UnixNano())
	}
	s.loopWG.Add(1)
	go func() {
		defer s.loopWG.Done()
		cur := ts
		for i, c := range cs {
			if i == 1 && live {
				s.liveFanOuts.Add(-1)
			}
			for next := cur.next.Load(); next != nil; next = cur.next.Load() {
				cur = next // a reload's
			}
			if i > 0 {
				s.mu.Lock()
				removed := s.tasks[cur.t.Name] != cur
				s.mu.Unlock()
				if removed || s.loopCtx.Err() != nil {
					return
				}
			}
			s.fanOut(s.loopCtx, cur, c)
		}
		if len(cs) == 1 && live {
			s.liveFanOuts.Add(-1)
		}
	}()
}

// catchUp is a tick to catch up, and, with zones, the zones whose latest
// missed tick it is; reason is its runs' (tick when ""); only, when not
// nil, are the only entities it runs (a backfill's).
type catchUp struct {
	T      time.Time
	zones  map[string]bool
	reason driver.Reason
	only   []string
	// backfill names the run of the backfill whose tick it is ("": none):
	// its part of the tick's record is its own.
	backfill string
	// recordOf is the record of its own that decides its runs
	// (driver.Request.RecordOf): a backfill's that runs every entity again.
	recordOf string
}

// runRecord is how long a task's run record is kept
// (driver.Request.Record): run_record, or with catch_up_runs = "all" as
// long as a tick may be caught up and an hour more, if that is longer.
func runRecord(t *config.Task) time.Duration {
	if t.CatchUpRuns != config.CatchUpAll {
		return t.RunRecord
	}
	return max(t.RunRecord, t.CatchUp+time.Hour)
}

// tickReader reads a task's tick records (the store's fleet).
type tickReader interface {
	Ticks(ctx context.Context, task string, limit int) ([]driver.TickRecord, error)
	Actions(ctx context.Context, task string, limit int) ([]driver.Action, error)
	Claim(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// olderMissed are the ticks catch_up_runs = "all" runs after latest, the
// latest missed: every tick before it within the catch-up window that no
// replica fanned out (its tick record is missing from the fleet's
// history) and the task was not paused at, oldest first, the newest catch_up_max - 1 of them. A tick
// older than the history keeps is not one. Their runs' reason is
// catch_up, decided by the run record: an entity runs each at most once,
// whatever ran since.
func olderMissed(ctx context.Context, fleet tickReader, log *slog.Logger, ts *taskState, now, latest time.Time) []catchUp {
	t := ts.t
	recs, err := fleet.Ticks(ctx, t.Name, t.HistoryTicks)
	if err != nil {
		log.Warn("cannot read which ticks ran: only the latest missed tick is caught up", logs.KeyTask, t.Name, logs.KeyError, err)
		return nil
	}
	// A tick while the task was paused was skipped, not missed.
	actions, err := fleet.Actions(ctx, t.Name, t.HistoryTicks)
	if err != nil {
		log.Warn("cannot read when the task was paused: only the latest missed tick is caught up", logs.KeyTask, t.Name, logs.KeyError, err)
		return nil
	}
	ran := make(map[int64]bool, len(recs))
	for _, r := range recs {
		ran[r.Tick.UnixNano()] = true
	}
	from := now.Add(-t.CatchUp)
	if len(recs) == t.HistoryTicks && recs[len(recs)-1].Tick.After(from) {
		from = recs[len(recs)-1].Tick // older than the history keeps: unknown
	}
	var missed []time.Time
	for at := ts.sched.Next(from.Add(-time.Nanosecond)); !at.IsZero() && at.Before(latest); at = ts.sched.Next(at) {
		if !ran[at.UnixNano()] && !history.Paused(actions, at) {
			missed = append(missed, at)
		}
	}
	if over := len(missed) - (t.CatchUpMax - 1); over > 0 {
		log.Warn("more ticks missed than catch_up_max: the oldest stay missed", logs.KeyTask, t.Name, "missed", len(missed)+1,
			"catch_up_max", t.CatchUpMax, "from", missed[0].UTC().Format(time.RFC3339), "to", missed[over-1].UTC().Format(time.RFC3339))
		missed = missed[over:]
	}
	if len(missed) == 0 {
		return nil
	}
	// One replica of those starting now catches up, one tick after another:
	// at once, one's fan-out of an older tick would find an entity busy
	// with the other's of a newer one, and run it after.
	name := "catch-up:" + t.Name + ":" + latest.UTC().Format(time.RFC3339)
	if mine, err := fleet.Claim(ctx, name, t.CatchUp); err != nil || !mine {
		if err != nil {
			log.Warn("cannot claim the older missed ticks' catch-up: left to the replica that does", logs.KeyTask, t.Name, logs.KeyError, err)
		}
		return nil
	}
	cs := make([]catchUp, len(missed))
	for i, at := range missed {
		cs[i] = catchUp{T: at, reason: driver.ReasonCatchUp}
	}
	log.Info("catching up the older missed ticks, oldest first", logs.KeyTask, t.Name, "ticks", len(cs),
		"from", missed[0].UTC().Format(time.RFC3339), "to", missed[len(missed)-1].UTC().Format(time.RFC3339))
	return cs
}

// catchUps are the ticks ts misses at now, within its catch-up window, and
// newer than the last it fanned out: the latest, or, with zones, each
// zone's latest, oldest first.
func catchUps(ts *taskState, now time.Time) []catchUp {
	t, last := ts.t, ts.lastTick.Load()
	if ts.zones == nil {
		if prev := schedule.Prev(t.Schedule, now, t.CatchUp); !prev.IsZero() && prev.UnixNano() > last {
			return []catchUp{{T: prev}}
		}
		return nil
	}
	by := map[time.Time]map[string]bool{}
	for name, s := range ts.zones.each() {
		if prev := schedule.Prev(s, now, t.CatchUp); !prev.IsZero() && prev.UnixNano() > last {
			if by[prev] == nil {
				by[prev] = map[string]bool{}
			}
			by[prev][name] = true
		}
	}
	out := make([]catchUp, 0, len(by))
	for T, zs := range by {
		out = append(out, catchUp{T: T, zones: zs})
	}
	slices.SortFunc(out, func(a, b catchUp) int { return a.T.Compare(b.T) })
	return out
}
