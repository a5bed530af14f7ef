package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/tickd/tickd/lease"
)

// waitForLimit turns a run a limit had no room for into a due run, as it
// was asked for (a tick's run keeps its tick), due when the limit may have
// room: the run is not skipped, and not counted as failed.
func (s *Scheduler) waitForLimit(ctx context.Context, d lease.Due, err error) {
	wait, limit, why := time.Second, "", ""
	var le *lease.LimitedError
	if errors.As(err, &le) {
		wait, limit, why = le.Wait, le.Limit, le.Why
	}
	s.log.Debug("run waits for a limit", KeyTask, d.Task, KeyEntity, d.Entity, KeyReason, d.Reason, "limit", limit, "why", why, "wait", wait.String())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ReleaseTimeout)
	defer cancel()
	if err := s.store.Enqueue(ctx, d, wait); err != nil {
		s.storeFailed("enqueue", "enqueue", "cannot queue a run that waits for a limit", Event{Task: d.Task, Entity: d.Entity}, err)
	}
}
