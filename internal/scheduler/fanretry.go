package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/lease/driver"
)

// busyEntity counts entity id, found busy (err), as on_busy says: a
// replacing one, or a busy one (its buffered ticks cut moved in their
// records); a catch-up's is kept to be asked again (retryHeld), with its
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

// heldBack is an entity a catch-up's or a backfill's fan-out found no
// room for under a limit, asked again at at (the wait the limit told).
type heldBack struct {
	id string
	at time.Time
}

// limitedEntity keeps entity id, which a limit had no room for (err), to
// be asked again when the limit says (retryHeld): an older tick's run
// waits in the limit's line behind the live ticks' runs, in the fan-out
// (a due entry is the entity's live tick's).
func (f *fanOut) limitedEntity(id string, err error) {
	wait := driver.FullPoll
	if le := (*lease.LimitedError)(nil); errors.As(err, &le) && le.Wait > 0 {
		wait = le.Wait
	}
	f.limited = append(f.limited, heldBack{id, f.s.clock.Now().Add(wait)})
}

// retryHeld asks again for the entities a catch-up's or a backfill's
// fan-out found busy (every busyPoll at most, until until: an entity's
// older ticks run after the run that was going, and in order) or limited
// (when the limit said, until limitUntil, or the fan-out's end for a
// zero one). Those still held back then are counted busy, or limited.
func (f *fanOut) retryHeld() error {
	poll := retry.Backoff{First: 5 * time.Millisecond, Max: busyPoll}
	for {
		now := f.s.clock.Now()
		if !now.Before(f.until) {
			f.n.Busy += len(f.busy)
			f.busy = nil
		}
		if !f.limitUntil.IsZero() && !now.Before(f.limitUntil) {
			f.n.Limited += len(f.limited)
			f.limited = nil
		}
		if len(f.busy) == 0 && len(f.limited) == 0 {
			return nil
		}
		var ok bool
		if len(f.busy) > 0 {
			ok = poll.Wait(f.ctx.Done())
		} else {
			ok = retry.Wait(f.ctx.Done(), slices.MinFunc(f.limited, func(a, b heldBack) int { return a.at.Compare(b.at) }).at.Sub(now))
		}
		if !ok {
			return context.Cause(f.ctx)
		}
		ids := f.busy
		f.busy = nil
		now = f.s.clock.Now()
		f.limited = slices.DeleteFunc(f.limited, func(h heldBack) bool {
			if h.at.After(now) {
				return false
			}
			ids = append(ids, h.id)
			return true
		})
		for j, id := range ids { // positions past the stream's: one batch
			if err := f.addAt(id, f.pos+j); err != nil {
				return err
			}
		}
		f.flush()
	}
}
