package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrDuplicateReplica is matched by a *DuplicateReplicaError.
var ErrDuplicateReplica = errors.New("lease: another process announces the same replica id")

// Announce records, for ttl, the tasks this replica runs: a replica that
// takes a due run for a task it does not know (during a config rollout)
// leaves it for one that does (Known).
//
// An error matching *DuplicateReplicaError (the announcement was made) says that
// another live process announced the same replica id: two replicas share a
// replica_id, and their records (holder, status) cannot be told apart.
func (s *Store) Announce(ctx context.Context, tasks []string, ttl time.Duration) error {
	a := announceValue{Tasks: tasks, Process: s.nonce, Host: s.host, Version: s.opts.Version}
	if err := s.b.announce(ctx, a, ttl); err != nil {
		return fmt.Errorf("announce tasks: %w", err)
	}
	return nil
}

// DuplicateReplicaError says which other process announced this store's
// replica id.
type DuplicateReplicaError struct {
	Replica string
	Host    string    // the other process's host
	Since   time.Time // when it started announcing
}

func (e *DuplicateReplicaError) Error() string {
	return fmt.Sprintf("%v %q (on host %s, since %s): give each replica its own replica_id", ErrDuplicateReplica, e.Replica,
		e.Host, e.Since.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrDuplicateReplica) true.
func (e *DuplicateReplicaError) Is(target error) bool { return target == ErrDuplicateReplica }

// Replica is a replica's current announcement.
type Replica struct {
	ID      string
	Host    string
	Version string
	Tasks   []string
	Since   time.Time // when this process first announced (zero from an older tickd)
	Seen    time.Time // its last announcement
	// DuplicateOn is, while two live processes announce this replica id,
	// the host of the other one (as the last of them to find it saw it);
	// "" otherwise.
	DuplicateOn string
}

// Replicas lists the replicas whose announcement is current, by id.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	rs, err := s.b.replicas(ctx)
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", err)
	}
	slices.SortFunc(rs, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return rs, nil
}

// Known says whether a replica whose announcement has not run out runs
// task.
func (s *Store) Known(ctx context.Context, task string) (bool, error) {
	ok, err := s.b.known(ctx, task)
	if err != nil {
		return false, fmt.Errorf("read announced tasks: %w", err)
	}
	return ok, nil
}

// Ping checks that the backend answers.
func (s *Store) Ping(ctx context.Context) error { return s.b.ping(ctx) }
