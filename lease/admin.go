package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Enqueue stores a durable request for a run of (task, entity) after delay.
// One request per (task, entity) is kept: an earlier pending one covers it.
func (s *Store) Enqueue(ctx context.Context, d Due, delay time.Duration) error {
	if err := checkRequestIDs(d.Requests); err != nil {
		return err
	}
	err := s.b.enqueue(ctx, d, delay)
	s.noteAcks(err)
	if err != nil {
		return fmt.Errorf("enqueue %s/%s: %w", d.Task, d.Entity, err)
	}
	return nil
}

// TakeDue takes up to limit due requests. Each is hidden from other takers
// for visibility; pass it as Request.From so the release acks it, or Ack it.
// A request whose taker dies comes back after visibility.
func (s *Store) TakeDue(ctx context.Context, limit int, visibility time.Duration) ([]Due, error) {
	ds, err := s.b.take(ctx, limit, visibility, s.token())
	if err != nil {
		return nil, fmt.Errorf("take due entries: %w", err)
	}
	return ds, nil
}

// Ack removes a taken due request, if it is still the one taken, without a
// run: its requests are answered AnswerDropped.
func (s *Store) Ack(ctx context.Context, d Due) error {
	if err := s.b.ack(ctx, d); err != nil {
		return fmt.Errorf("ack %s/%s: %w", d.Task, d.Entity, err)
	}
	return nil
}

// Unlocked is what an unlock did to a held lease.
type Unlocked struct {
	// Held is the lease as it was found; its TTL is how long it has left
	// at most: a revoked lease is free by then, released or not.
	Held
	Freed   bool // force: the lease is free now
	Already bool // it had been revoked before: nothing changed
	// Told: this store held the lease, and its run was told to stop at
	// once; otherwise the holder hears it at its next renewal.
	Told bool
}

// Unlock revokes the lease of (task, entity), whoever holds it: the
// holder is told to stop (at once when this store holds it, at its next
// renewal otherwise), and the lease stays held, busy for every other run,
// until the holder has released it or its TTL has passed, whichever comes
// first. So an unlock never lets two runs of one entity overlap. With force
// the lease is freed at once and the unlock recorded as the entity's last
// run by who: a holder still running then overlaps the next run. It
// returns what it found and did, or ErrNotHeld.
func (s *Store) Unlock(ctx context.Context, task, entity, by string, force bool) (Unlocked, error) {
	u, ok, err := s.b.unlock(ctx, task, entity, by, force)
	if err != nil {
		return Unlocked{}, fmt.Errorf("unlock %s/%s: %w", task, entity, err)
	}
	if !ok {
		return Unlocked{}, ErrNotHeld
	}
	if l := s.holding(task, entity, u.Fence); l != nil {
		cause := ErrRevoked
		if u.Freed {
			cause = ErrLost
		}
		s.drop(l, cause)
		u.Told = true
	}
	return u, nil
}

// holding returns the lease of (task, entity) with fence that this store
// holds, if any.
func (s *Store) holding(task, entity string, fence int64) *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.held {
		if l.Fence == fence && l.Task == task && l.Entity == entity {
			return l
		}
	}
	return nil
}

// Leases calls fn for each held lease of task ("" for all tasks). Redis is
// read with SCAN, a page at a time.
func (s *Store) Leases(ctx context.Context, task string, fn func(Held) error) error {
	return s.b.leases(ctx, task, fn)
}

// LastRuns calls fn for the last finished run of each entity of task ("" for
// all), as long as its state is retained.
func (s *Store) LastRuns(ctx context.Context, task string, fn func(LastRun) error) error {
	return s.b.lastRuns(ctx, task, fn)
}

// DueEntries calls fn for each pending request of task ("" for all tasks):
// earliest first for one task.
func (s *Store) DueEntries(ctx context.Context, task string, fn func(Due) error) error {
	return s.b.dueEntries(ctx, task, fn)
}

// EntityState is what the store knows of one (task, entity).
type EntityState struct {
	Held    *Held    // the lease, if someone holds it
	Last    *LastRun // the last finished run, if retained
	Pending *Due     // the pending request, if any
}

// Entity reads the state of one (task, entity) in one round trip.
func (s *Store) Entity(ctx context.Context, task, entity string) (EntityState, error) {
	return s.b.one(ctx, task, entity)
}

// DueCount is the number of pending requests.
func (s *Store) DueCount(ctx context.Context) (int, error) { return s.b.dueCount(ctx) }

// SetPaused pauses (with no reason, until resumed) or resumes the ticks of
// task on every replica.
//
// Deprecated: use Pause or Resume.
func (s *Store) SetPaused(ctx context.Context, task string, paused bool) error {
	if paused {
		return s.Pause(ctx, task, PauseInfo{At: s.clock.Now()})
	}
	return s.Resume(ctx, task)
}

// Taken says, for each of chunks (Request.Chunk) of tick of task, whether a
// fan-out took it already: the leases of its entities were granted then, in
// the step that took it, so a fan-out that sent it now would get
// ErrAlreadyRan for all of it. A fan-out that skipped part of the stream
// asks this before it comes back to that part. The in-process store takes
// no chunks: it answers false for each.
func (s *Store) Taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error) {
	if len(chunks) == 0 {
		return nil, nil
	}
	t, err := s.b.taken(ctx, task, tick, chunks)
	if err != nil {
		return nil, fmt.Errorf("taken chunks of %s: %w", task, err)
	}
	return t, nil
}

// Paused returns the set of paused tasks; a pause whose PauseInfo.Until
// passed is over.
//
// Deprecated: use Pauses, whose keys are the paused tasks.
func (s *Store) Paused(ctx context.Context) (map[string]bool, error) {
	ps, err := s.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(ps))
	for t := range ps {
		m[t] = true
	}
	return m, nil
}

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

// ErrDuplicateReplica is matched by a *DuplicateReplicaError.
var ErrDuplicateReplica = errors.New("lease: another process announces the same replica id")

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
