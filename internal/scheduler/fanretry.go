package scheduler

import (
	"context"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/lease/driver"
)

// busyEntity counts entity id, found busy (err), as on_busy says: a
// replacing one, or a busy one (its buffered ticks cut moved in their
// records); a catch-up's is kept to be asked again (retryBusy), with its
// attributes, and busyEntity says so.
func (f *fanOut) busyEntity(id string, err error) (again bool) {
	s, t := f.s, f.ts.t
	switch {
	case driver.ByRecord(f.reason):
		f.busy = append(f.busy, id)
		return true
	case t.OnBusy == config.OnBusyReplace:
		f.n.Replacing++
		s.log.Debug("entity busy: its holder is stopped, and this tick runs once it has ended", logs.KeyTask, t.Name, logs.KeyEntity, id, logs.Tick(f.T), logs.KeyError, err)
	default:
		f.n.Busy++
		s.history.unbuffered(t, err)
		s.log.Debug(logs.MsgSkippedBusy, logs.KeyTask, t.Name, logs.KeyEntity, id, logs.Tick(f.T), logs.KeyError, err)
	}
	return false
}

// retryFailed tries again, with retries as long as the tick may run, the
// entities whose batch Redis failed while the other shards went on.
func (f *fanOut) retryFailed() error {
	f.deferFailed = false
	failed := f.failed
	f.failed = nil
	for _, sk := range failed {
		for i, id := range sk.ids {
			if err := f.addAt(id, sk.pos+i); err != nil {
				return err
			}
		}
	}
	f.flush()
	return nil
}

// busyPoll is how often, at most, a catch-up or a backfill asks again for
// the entities it found busy; it asks 5ms after, then twice as long each
// time: an entity is often busy only with its run of the tick before,
// ended and its release on its way (a backfill of a tick after another
// found a few each tick, and waited 100ms each time: 20 times slower).
const busyPoll = 100 * time.Millisecond

// retryBusy asks again, every busyPoll at most, for the entities a catch-up's
// fan-out found busy (with a run of a newer tick, elsewhere), until each
// has run or the tick leaves the catch-up window: an entity's catch-ups
// run after the run that was going, and in order. Those still busy then
// are counted busy.
func (f *fanOut) retryBusy() error {
	poll := retry.Backoff{First: 5 * time.Millisecond, Max: busyPoll}
	for len(f.busy) > 0 && f.s.clock.Now().Before(f.until) {
		if !poll.Wait(f.ctx.Done()) {
			return context.Cause(f.ctx)
		}
		ids := f.busy
		f.busy = nil
		for j, id := range ids { // positions past the stream's: one batch
			if err := f.addAt(id, f.pos+j); err != nil {
				return err
			}
		}
		f.flush()
	}
	f.n.Busy += len(f.busy)
	f.busy = nil
	return nil
}
