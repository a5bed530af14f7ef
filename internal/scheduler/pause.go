package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tickd/tickd/internal/logs"
)

// readPaused reads the paused tasks; the pause loop calls it every
// PausePoll, so that every replica stops or resumes ticking a task within
// that long.
func (s *Scheduler) readPaused(ctx context.Context) {
	pauses, err := s.store.Fleet().Pauses(ctx)
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
		s.metrics.Paused(name, paused)
		if was := ts.paused.Swap(paused); was != paused {
			s.log.Info(map[bool]string{true: "task paused", false: "task resumed"}[paused], logs.KeyTask, name)
		}
		if paused {
			ts.fanOuts.stopAll(errPaused)
		}
	}
}

// errPaused is the cause of a fan-out stopped by tickd pause; errRemoved,
// of one whose task a reload took out of the config.
var (
	errPaused  = errors.New("the task was paused")
	errRemoved = errors.New("the task was taken out of the config")
)

// fanOuts are a task's fan-outs under way: a pause stops each (no run of
// it starts after that, but for a batch whose leases were granted then),
// and a fan-out that begins once the task is paused stops at once. A
// reload that changes the task hands them to its new state; one that
// removes it stops them.
type fanOuts struct {
	mu   sync.Mutex
	next int
	stop map[int]context.CancelCauseFunc
}

// begin registers a fan-out of ts: its context, stopped with errPaused by
// a pause, and what to call when it ends.
func (f *fanOuts) begin(ctx context.Context, ts *taskState) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	if f.stop == nil {
		f.stop = map[int]context.CancelCauseFunc{}
	}
	id := f.next
	f.next++
	f.stop[id] = cancel
	f.mu.Unlock()
	if ts.paused.Load() { // paused between the tick's look and here
		cancel(errPaused)
	}
	return ctx, func() {
		f.mu.Lock()
		delete(f.stop, id)
		f.mu.Unlock()
		cancel(nil)
	}
}

// stopAll stops every fan-out under way, with cause why.
func (f *fanOuts) stopAll(why error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cancel := range f.stop {
		cancel(why)
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
