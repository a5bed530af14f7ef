package lease

import (
	"context"
	"errors"

	"github.com/tickd/tickd/lease/driver"
)

// CheckLayout returns an error (the Redis driver: a *redisdriver.LayoutError) when the prefix holds keys of an
// older key layout or names a newer one: what the store reads there would
// not be what the replicas running beside it write. Nil for a driver with
// no layout (the in-process one).
func (f Fleet) CheckLayout(ctx context.Context) error {
	s := f.s
	if d, ok := s.b.(driver.Admin); ok {
		return d.CheckLayout(ctx)
	}
	return nil
}

// Migrate moves the keys of layout 1 (tickd before buckets) into this
// layout (the Redis driver's Migrate says how). Every tickd must be stopped
// first.
func (f Fleet) Migrate(ctx context.Context) (driver.Migrated, error) {
	s := f.s
	if d, ok := s.b.(driver.Admin); ok {
		return d.Migrate(ctx)
	}
	return driver.Migrated{}, errors.New("lease: migrate: the in-process store has no keys")
}

// Reshard keeps task in n shards from now on, moving what its entities
// have to their new shards (the Redis driver's Reshard says how); it
// refuses while a replica runs the task.
func (f Fleet) Reshard(ctx context.Context, task string, n int) (driver.Resharded, error) {
	s := f.s
	d, ok := s.b.(driver.Admin)
	if !ok {
		return driver.Resharded{}, errors.New("lease: reshard: the in-process store has no keys")
	}
	r, err := d.Reshard(ctx, task, n)
	if err == nil {
		s.shards.mu.Lock()
		delete(s.shards.counts, task) // read again
		s.shards.mu.Unlock()
	}
	return r, err
}

// Replication probes the replicas: one small write (a key that expires in a
// minute) and one WAIT, as a lease write does. The in-process store has no
// replicas.
func (f Fleet) Replication(ctx context.Context) (driver.Replication, error) {
	s := f.s
	if d, ok := s.b.(driver.Admin); ok {
		return d.Replication(ctx)
	}
	return driver.Replication{Role: "in-process", Mode: driver.AcksNever}, nil
}
