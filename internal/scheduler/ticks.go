package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/tickd/tickd/internal/logs"
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
	for !next.IsZero() {
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
	if T := cs[len(cs)-1].T; T.UnixNano() > ts.lastTick.Load() {
		ts.lastTick.Store(T.UnixNano())
	}
	s.loopWG.Add(1)
	go func() {
		defer s.loopWG.Done()
		cur := ts
		for i, c := range cs {
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
			s.fanOut(s.loopCtx, cur, c.T, c.zones)
		}
	}()
}

// catchUp is a tick to catch up, and, with zones, the zones whose latest
// missed tick it is.
type catchUp struct {
	T     time.Time
	zones map[string]bool
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
		out = append(out, catchUp{T, zs})
	}
	slices.SortFunc(out, func(a, b catchUp) int { return a.T.Compare(b.T) })
	return out
}
