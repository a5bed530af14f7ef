package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/lease/driver"
)

// acquireRetrying acquires a batch; while Redis fails, it retries with
// backoff as long as the tick may still run (the catch-up window, at least
// 10s). Requests still failing are returned with their errors.
func (s *Scheduler) acquireRetrying(ctx context.Context, ts *taskState, T time.Time, reqs []driver.Request) []lease.Result {
	res := s.store.AcquireBatch(ctx, reqs)
	backoff := retry.Backoff{First: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		// Busy and already-ran are answers; anything else is retried.
		var pending []int
		var early, failed error
		var quarantine *lease.QuarantineError
		var ee *lease.EarlyError // out of the loop: errors.As makes them escape
		var qe *lease.QuarantineError
		wait := backoff.Next()
		for i, r := range res {
			switch {
			case r.Err == nil, errors.Is(r.Err, lease.ErrBusy), errors.Is(r.Err, lease.ErrAlreadyRan):
				continue
			case errors.Is(r.Err, driver.ErrNotAcknowledged):
				continue // an answer: the store handed the run over (OnAcks logs it)
			case errors.Is(r.Err, lease.ErrLimited):
				continue // an answer: the run waits for the limit (waitForLimit)
			case errors.As(r.Err, &ee):
				// This clock runs ahead of Redis's: wait for the tick.
				early = r.Err
				wait = max(wait, min(ee.Wait, 2*time.Second))
			case errors.As(r.Err, &qe):
				// Not a Redis error: a first start, or a data loss.
				quarantine = qe
				wait = max(wait, min(qe.Left, 2*time.Second))
			default:
				failed = r.Err
			}
			pending = append(pending, i)
		}
		if ctx.Err() != nil {
			return res // a stop, not a Redis failure: the fan-out says it stopped
		}
		if quarantine != nil {
			s.quarantined(quarantine.Left)
		}
		if early != nil {
			s.logLimited("early:"+ts.t.Name, "tick not yet due by Redis's clock: is this host's clock ahead?", logs.KeyTask, ts.t.Name, logs.Tick(T), logs.KeyError, early)
		}
		if failed != nil {
			s.storeFailed("acquire", "acquire:"+ts.t.Name, "cannot acquire leases; retrying", Event{Task: ts.t.Name, Tick: T}, failed)
		}
		if len(pending) == 0 || s.clock.Now().Sub(T) > ts.t.LateLimit() {
			return res
		}
		if !retry.Wait(ctx.Done(), wait) {
			return res
		}
		retry := make([]driver.Request, len(pending))
		for j, i := range pending {
			retry[j] = reqs[i]
			retry[j].Chunk = "" // a retry may hold part of a chunk: entity by entity
		}
		for j, r := range s.store.AcquireBatch(ctx, retry) {
			res[pending[j]] = r
		}
	}
}
