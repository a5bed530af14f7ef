package memdriver

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

func (b *memDriver) SaveBackfill(_ context.Context, bf driver.Backfill, hold time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	cur := b.backfills[bf.ID]
	if cur != nil && (cur.Cancelled != "" || cur.Holder != b.cfg.Holder && cur.Until.After(now)) {
		return false, nil
	}
	bf.Cancelled, bf.Holder, bf.Until = "", "", time.Time{}
	if hold > 0 {
		bf.Holder, bf.Until = b.cfg.Holder, now.Add(hold)
	}
	bf.Entities, bf.Unknown = slices.Clone(bf.Entities), slices.Clone(bf.Unknown)
	b.backfills[bf.ID] = &bf
	return true, nil
}

func (b *memDriver) Backfills(context.Context) ([]driver.Backfill, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	maps.DeleteFunc(b.backfills, func(_ string, bf *driver.Backfill) bool {
		return !bf.Ended.IsZero() && now.Sub(bf.Ended) > driver.BackfillKept
	})
	out := make([]driver.Backfill, 0, len(b.backfills))
	for _, bf := range b.backfills {
		c := *bf
		c.Entities, c.Unknown = slices.Clone(bf.Entities), slices.Clone(bf.Unknown)
		out = append(out, c)
	}
	return out, nil
}

func (b *memDriver) CancelBackfill(_ context.Context, id, by string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bf := b.backfills[id]
	if bf == nil {
		return false, nil
	}
	if bf.Cancelled == "" {
		bf.Cancelled = by
	}
	return true, nil
}

func (b *memDriver) RunRecord(_ context.Context, task string, ticks []time.Time, entities []string) ([]driver.TickRan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]driver.TickRan, len(ticks))
	for i, T := range ticks {
		out[i].Fanned = b.ran[ranKey{member{task, fannedMark}, T, ""}].After(now)
		if !b.ran[ranKey{member{task: task}, T, ""}].After(now) {
			continue
		}
		out[i].Kept, out[i].Ran = true, make([]bool, len(entities))
		for j, e := range entities {
			out[i].Ran[j] = b.ran[ranKey{member{task, e}, T, ""}].After(now)
			if b.ran[ranKey{member{task, e}, T, driver.BackfillFailed}].After(now) {
				if out[i].Failed == nil {
					out[i].Failed = make([]bool, len(entities))
				}
				out[i].Failed[j] = true
			}
		}
	}
	return out, nil
}

// fannedMark is the entity of a tick's fan mark in the ran map: no
// entity's id (tasks.CheckID refuses control characters).
const fannedMark = "\x00fanned"

// markTick keeps, for req's tick, that its run record is kept (Redis's
// bit 0), and that a tick's acquire asked for it (its fan mark).
func (b *memDriver) markTick(req *driver.Request, now time.Time) {
	if req.Record > 0 {
		b.ran[ranKey{member{task: req.Task}, req.Tick, ""}] = now.Add(req.Record)
	}
	if req.Reason == driver.ReasonTick && !req.Tick.IsZero() {
		b.ran[ranKey{member{req.Task, fannedMark}, req.Tick, ""}] = now.Add(driver.FannedKept)
	}
}

// MarkFailed is the Redis driver's: for an entity that ran under a
// record (its run record's bit, kept or not), else nothing.
func (b *memDriver) MarkFailed(_ context.Context, task string, tick time.Time, entity string, failed bool, keep time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := ranKey{member{task, entity}, tick, driver.BackfillFailed}
	switch {
	case !failed:
		delete(b.ran, k)
	case !b.ran[ranKey{member{task, entity}, tick, ""}].IsZero():
		b.ran[k] = b.now().Add(keep)
	}
	return nil
}
