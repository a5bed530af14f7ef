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
func (f Fleet) Announce(ctx context.Context, tasks []string, ttl time.Duration) error {
	s := f.s
	a := driver.Announcement{Tasks: tasks, Process: s.tok.nonce, Host: s.host, Version: s.opts.Version, Shards: s.shards.announcedShards(tasks)}
	if err := s.b.Announce(ctx, a, ttl); err != nil {
		return fmt.Errorf("announce tasks: %w", err)
	}
	return nil
}

// Withdraw removes this process's announcement, at a graceful stop: the
// replica is gone from the live ones at once, and a process that starts
// under the same replica id next does not wait for it (ReplicaInUse). An
// announcement of another process under this id is left alone.
func (f Fleet) Withdraw(ctx context.Context) error {
	s := f.s
	a := driver.Announcement{Process: s.tok.nonce, Host: s.host, Version: s.opts.Version}
	if err := s.b.Announce(ctx, a, -time.Millisecond); err != nil {
		return fmt.Errorf("withdraw the announcement: %w", err)
	}
	return nil
}

// ReplicaInUse returns the live announcement of another process under
// this store's replica id, or nil: a process stopped without withdrawing
// (killed), whose announcement lapses within its TTL, or a live one
// (a copied unit file), whose announcement is renewed (Seen moves on).
func (f Fleet) ReplicaInUse(ctx context.Context) (*driver.Replica, error) {
	s := f.s
	rs, err := f.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.ID == s.opts.Replica && r.Process != "" && r.Process != s.tok.nonce {
			return &r, nil
		}
	}
	return nil, nil
}

// Replicas lists the replicas whose announcement is current, by id.
func (f Fleet) Replicas(ctx context.Context) ([]driver.Replica, error) {
	s := f.s
	rs, err := s.b.Replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", err)
	}
	slices.SortFunc(rs, func(a, b driver.Replica) int { return strings.Compare(a.ID, b.ID) })
	return rs, nil
}

// Known says whether a replica whose announcement has not run out runs
// task.
func (f Fleet) Known(ctx context.Context, task string) (bool, error) {
	s := f.s
	ok, err := s.b.Known(ctx, task)
	if err != nil {
		return false, fmt.Errorf("read announced tasks: %w", err)
	}
	return ok, nil
}

// Ping checks that the backend answers.
func (f Fleet) Ping(ctx context.Context) error {
	s := f.s
	return s.b.Ping(ctx)
}
