package scheduler

import (
	"context"
	"time"
)

// readPaused reads the paused tasks; the pause loop calls it every
// PausePoll, so that every replica stops or resumes ticking a task within
// that long.
func (s *Scheduler) readPaused(ctx context.Context) {
	pauses, err := s.store.Pauses(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.storeFailed("paused", "paused", "cannot read paused tasks", Event{}, err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ts := range s.tasks {
		_, paused := pauses[name]
		s.metrics.paused(name, paused)
		if was := ts.paused.Swap(paused); was != paused {
			s.log.Info(map[bool]string{true: "task paused", false: "task resumed"}[paused], KeyTask, name)
		}
	}
}

// poll calls fn now and then every interval, until ctx is done.
func poll(ctx context.Context, every time.Duration, fn func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
