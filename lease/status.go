package lease

import "context"

// Leases calls fn for each held lease of task ("" for all tasks). Redis is
// read with SCAN, a page at a time.
func (s *Store) Leases(ctx context.Context, task string, fn func(Held) error) error {
	return s.b.Leases(ctx, task, fn)
}

// LastRuns calls fn for the last finished run of each entity of task ("" for
// all), as long as its state is retained.
func (s *Store) LastRuns(ctx context.Context, task string, fn func(LastRun) error) error {
	return s.b.LastRuns(ctx, task, fn)
}

// Entity reads the state of one (task, entity) in one round trip.
func (s *Store) Entity(ctx context.Context, task, entity string) (EntityState, error) {
	return s.b.One(ctx, task, entity)
}
