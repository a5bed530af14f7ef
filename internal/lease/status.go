package lease

import (
	"context"

	"github.com/tickd/tickd/lease/driver"
)

// Leases calls fn for each held lease of task ("" for all tasks). Redis is
// read with SCAN, a page at a time.
func (f Fleet) Leases(ctx context.Context, task string, fn func(driver.Held) error) error {
	s := f.s
	return s.shards.eachShard(ctx, task, func(name string) error {
		return s.b.Leases(ctx, name, func(h driver.Held) error {
			h.Task = taskOf(h.Task)
			return fn(h)
		})
	})
}

// LastRuns calls fn for the last finished run of each entity of task ("" for
// all), as long as its state is retained.
func (f Fleet) LastRuns(ctx context.Context, task string, fn func(driver.LastRun) error) error {
	s := f.s
	return s.shards.eachShard(ctx, task, func(name string) error {
		return s.b.LastRuns(ctx, name, func(r driver.LastRun) error {
			r.Task = taskOf(r.Task)
			return fn(r)
		})
	})
}

// Entity reads the state of one (task, entity) in one round trip.
func (f Fleet) Entity(ctx context.Context, task, entity string) (driver.EntityState, error) {
	s := f.s
	name, _, err := s.shards.shardName(ctx, task, entity, false)
	if err != nil {
		return driver.EntityState{}, err
	}
	st, err := s.b.One(ctx, name, entity)
	if st.Held != nil {
		st.Held.Task = task
	}
	if st.Last != nil {
		st.Last.Task = task
	}
	if st.Pending != nil {
		st.Pending.Task, st.Pending.Shard = driver.SplitShard(st.Pending.Task)
	}
	return st, err
}
