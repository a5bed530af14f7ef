package scheduler

import (
	"context"
	"time"

	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/schedule"
)

// tickLoop waits for each tick of a task and fans it out. Ticks are computed
// from the previous planned tick, never from now.
func (s *Scheduler) tickLoop(ctx context.Context, ts *taskState) {
	t := ts.t
	now := s.clock.Now()
	if t.CatchUp > 0 {
		// Not a tick the task's state before a reload fanned out (its fan-out
		// goes on under this one).
		if prev := schedule.Prev(t.Schedule, now, t.CatchUp); !prev.IsZero() && prev.UnixNano() > ts.lastTick.Load() {
			s.log.Info("catching up the latest missed tick", logs.KeyTask, t.Name, logs.Tick(prev))
			s.goFanOut(ts, prev)
		}
	}
	next := t.Schedule.Next(now)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !next.IsZero() {
		timer.Reset(next.Sub(s.clock.Now()))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now = s.clock.Now()
		if now.Before(next) { // the timer fired early against an offset clock
			continue
		}
		// Woken late (a pause, a frozen process): run the latest tick due, not
		// a flood of old ones, and only if it is young enough.
		skipped := 0
		for n := t.Schedule.Next(next); !n.IsZero() && !n.After(now); n = t.Schedule.Next(n) {
			next = n
			skipped++
		}
		if skipped > 0 {
			s.log.Warn("ticks missed while the process was late", logs.KeyTask, t.Name, "skipped", skipped, logs.Tick(next))
		}
		if late := now.Sub(next); late <= t.LateLimit() {
			if !ts.paused.Load() {
				s.goFanOut(ts, next)
			} else {
				s.metrics.Skipped(t.Name, "paused", 1)
				s.log.Debug("task paused: tick skipped", logs.KeyTask, t.Name, logs.Tick(next))
			}
		} else {
			s.log.Warn("tick too late to run", logs.KeyTask, t.Name, logs.Tick(next), "late", late.Round(time.Millisecond).String())
		}
		next = t.Schedule.Next(next)
	}
}

// goFanOut fans out in the background; Shutdown waits for it (the tick
// loop that calls it is itself counted, so the count never touches zero).
// The fan-out outlives its tick loop, which a reload stops: shutdown, a
// pause or the task's removal stop it (fanOuts).
func (s *Scheduler) goFanOut(ts *taskState, T time.Time) {
	ts.lastTick.Store(T.UnixNano())
	s.loopWG.Add(1)
	go func() { defer s.loopWG.Done(); s.fanOut(s.loopCtx, ts, T) }()
}
