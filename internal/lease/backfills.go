package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// SaveBackfill writes b and makes this store its holder for hold (0:
// none): false, nothing written, when b was cancelled or another store
// holds it (driver.Driver's SaveBackfill).
func (f Fleet) SaveBackfill(ctx context.Context, b driver.Backfill, hold time.Duration) (bool, error) {
	ok, err := f.s.b.SaveBackfill(ctx, b, hold)
	if err != nil {
		return false, fmt.Errorf("save backfill %s: %w", b.ID, err)
	}
	return ok, nil
}

// Backfills reads every backfill kept.
func (f Fleet) Backfills(ctx context.Context) ([]driver.Backfill, error) {
	bs, err := f.s.b.Backfills(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the backfills: %w", err)
	}
	return bs, nil
}

// CancelBackfill marks backfill id cancelled by by; false when there is
// none.
func (f Fleet) CancelBackfill(ctx context.Context, id, by string) (bool, error) {
	ok, err := f.s.b.CancelBackfill(ctx, id, by)
	if err != nil {
		return false, fmt.Errorf("cancel backfill %s: %w", id, err)
	}
	return ok, nil
}

// RunRecords reads and marks the tasks' run records (driver.Request.Record).
type RunRecords struct{ s *Store }

// RunRecords are the fleet's run records.
func (f Fleet) RunRecords() RunRecords { return RunRecords(f) }

// Read reads task's run record of each of ticks for entities, from
// the shard of each: a tick is Kept when the record of any of its shards
// is, and an entity of a shard whose record is not ran it not; Moved when
// any shard's is, and Forgotten when any shard's is.
func (f RunRecords) Read(ctx context.Context, task string, ticks []time.Time, entities []string) ([]driver.TickRan, error) {
	n, err := f.s.Shards(ctx, task)
	if err != nil {
		return nil, err
	}
	n = max(n, 1)
	ids, at := make([][]string, n), make([][]int, n) // by shard: the entities, their places
	for i, e := range entities {
		sh := driver.ShardOf(e, n)
		ids[sh], at[sh] = append(ids[sh], e), append(at[sh], i)
	}
	out := make([]driver.TickRan, len(ticks))
	for sh := range n {
		rs, err := f.s.b.RunRecord(ctx, driver.ShardName(task, sh), ticks, ids[sh])
		if err != nil {
			return nil, fmt.Errorf("read the run record of %s: %w", task, err)
		}
		for i, r := range rs {
			out[i].Forgotten, out[i].Fanned = out[i].Forgotten || r.Forgotten, out[i].Fanned || r.Fanned
			if !r.Kept {
				continue
			}
			if !out[i].Kept {
				out[i].Kept, out[i].Ran = true, make([]bool, len(entities))
			}
			for j, ran := range r.Ran {
				out[i].Ran[at[sh][j]] = ran
			}
			if r.Failed != nil && out[i].Failed == nil {
				out[i].Failed = make([]bool, len(entities))
			}
			for j, failed := range r.Failed {
				out[i].Failed[at[sh][j]] = failed
			}
		}
	}
	return out, nil
}

// MarkFailed keeps, for keep, that entity's run of task's tick failed, or
// (!failed) that a later run of it succeeded, in its shard's run record.
func (f RunRecords) MarkFailed(ctx context.Context, task string, tick time.Time, entity string, failed bool, keep time.Duration) error {
	n, err := f.s.Shards(ctx, task)
	if err != nil {
		return err
	}
	return f.s.b.MarkFailed(ctx, driver.ShardName(task, driver.ShardOf(entity, max(n, 1))), tick, entity, failed, keep)
}
