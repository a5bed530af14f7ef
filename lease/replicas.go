package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Announce records, for ttl, the tasks this replica runs: a replica that
// takes a due run for a task it does not know (during a config rollout)
// leaves it for one that does (Known).
//
// An error matching *DuplicateReplicaError (the announcement was made) says that
// another live process announced the same replica id: two replicas share a
// replica_id, and their records (holder, status) cannot be told apart.
func (s *Store) Announce(ctx context.Context, tasks []string, ttl time.Duration) error {
	a := driver.Announcement{Tasks: tasks, Process: s.nonce, Host: s.host, Version: s.opts.Version, Shards: s.announcedShards(tasks)}
	if err := s.b.Announce(ctx, a, ttl); err != nil {
		return fmt.Errorf("announce tasks: %w", err)
	}
	return nil
}

// Replicas lists the replicas whose announcement is current, by id.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	rs, err := s.b.Replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", err)
	}
	slices.SortFunc(rs, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return rs, nil
}

// Known says whether a replica whose announcement has not run out runs
// task.
func (s *Store) Known(ctx context.Context, task string) (bool, error) {
	ok, err := s.b.Known(ctx, task)
	if err != nil {
		return false, fmt.Errorf("read announced tasks: %w", err)
	}
	return ok, nil
}

// Ping checks that the backend answers.
func (s *Store) Ping(ctx context.Context) error { return s.b.Ping(ctx) }
