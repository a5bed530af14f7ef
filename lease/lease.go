// Package lease is tickd's lease protocol for a Go program that wants
// leases alone, without the scheduler: a lease per (task, entity), renewed
// while it is held, its Context cancelled the moment it can no longer be
// trusted, released with an outcome, and a fencing token that grows with
// every grant. The state lives in Redis, shared by every replica, or in
// this process:
//
//	store, err := lease.NewRedis(client, "tickd", lease.Options{Replica: "web-1"})
//	store := lease.NewMemory(lease.Options{})
//
// The words (tickdtype.Finished, tickdtype.OutcomeDone…) are tickdtype's.
// This package is a small door onto tickd's own store, which the scheduler
// runs on: the same grants, renewals, trust windows and fences. The
// protocol and the stored formats are described in the repository's
// internal/lease/doc.go.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
	"github.com/tickd/tickd/tickdtype"
)

// Errors of the store and of a lease's Context (context.Cause). Compare
// with errors.Is.
var (
	// ErrBusy: another holder has the lease (a *BusyError says who).
	ErrBusy = lease.ErrBusy
	// ErrAlreadyRan: the request's tick already started a run.
	ErrAlreadyRan = lease.ErrAlreadyRan
	// ErrQuarantine: the backend lost its data; nothing is granted until
	// every lease it may have forgotten has expired (Options.MaxTTL).
	ErrQuarantine = lease.ErrQuarantine
	// ErrLost: the lease was released by force, expired or taken over.
	ErrLost = lease.ErrLost
	// ErrUntrusted: the lease was not renewed within its trust window.
	ErrUntrusted = lease.ErrUntrusted
	// ErrRevoked: an operator unlocked the lease (Store.Unlock).
	ErrRevoked = lease.ErrRevoked
	// ErrReplaced: a newer tick revoked the lease (on_busy = "replace").
	ErrReplaced = lease.ErrReplaced
	// ErrReleased: the lease was released.
	ErrReleased = lease.ErrReleased
	// ErrClosed: the store was stopped.
	ErrClosed = lease.ErrClosed
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Replica is this process's id, recorded as the holder. "": "local".
	Replica string
	// ReplicaAcks is how many of the Redis primary's replicas must have a
	// grant or a renewal before it is trusted (NewRedis); the zero value is
	// tickdtype.AcksAuto.
	ReplicaAcks tickdtype.ReplicaAcks
	// MaxTTL is the longest lease TTL in use: after the backend lost its
	// data, nothing is granted for this long. 0: 1m.
	MaxTTL time.Duration
	// Clock is the store's clock; nil: the system's.
	Clock tickdtype.Clock
	// OnRenew, if set, is called after each successful renewal round;
	// OnRenewError with each failed one.
	OnRenew      func()
	OnRenewError func(error)
}

// Store hands out leases and keeps them alive: one per process, its keeper
// renews every lease it holds in one round every TTL/3.
type Store struct{ s *lease.Store }

// NewRedis returns a Store whose leases are in the Redis c reaches (a
// client, a Sentinel failover client or a Cluster client), under keys that
// begin with prefix: every process that shares c's Redis and prefix shares
// the leases. It starts nothing: Start does (a store also starts at its
// first grant).
func NewRedis(c redis.UniversalClient, prefix string, opts Options) (*Store, error) {
	d, err := redisdriver.New(c, prefix, opts.ReplicaAcks)
	if err != nil {
		return nil, err
	}
	return New(d, opts), nil
}

// NewMemory returns a Store whose leases are in this process: one
// process's runs never overlap, and nothing is shared with another.
func NewMemory(opts Options) *Store { return New(memdriver.New(), opts) }

// New returns a Store over d, a driver the caller built (lease/driver's
// contract, which is not yet stable: NewRedis and NewMemory name none of
// it). It starts nothing: Start does (a store also starts at its first
// grant).
func New(d driver.Driver, opts Options) *Store {
	return &Store{lease.New(d, lease.Options{Replica: opts.Replica, MaxTTL: opts.MaxTTL, Clock: opts.Clock,
		OnRenew: opts.OnRenew, OnRenewError: opts.OnRenewError})}
}

// Start starts the keeper, which renews the leases held, and the watch for
// a data loss. ctx bounds the start only.
func (s *Store) Start(ctx context.Context) error { return s.s.Start(ctx) }

// Stop stops the keeper and cancels the Context of every lease still held
// (cause ErrClosed). Release first: a lease left held stays in the backend
// until its TTL passes, and Stop reports it (ErrStillHeld's message).
func (s *Store) Stop(ctx context.Context) error { return s.s.Stop(ctx) }

// Request asks for the lease of one (Task, Entity).
type Request struct {
	Task, Entity string
	TTL          time.Duration // the lease's time to live; renewed every TTL/3
	// Reason says why the run happens, as recorded; "":
	// tickdtype.ReasonTrigger.
	Reason tickdtype.Reason
	// Tick is the scheduled instant of a tickdtype.ReasonTick run: the
	// acquire fails with ErrAlreadyRan when a tick run for a tick at or
	// after it already started.
	Tick time.Time
	// Queue, when the entity is busy, leaves a follow-up that the holder's
	// release turns into one run after it.
	Queue bool
}

// Acquire takes the lease of (req.Task, req.Entity) for req.TTL, or
// returns why not: a *BusyError (ErrBusy) when another holder has it,
// ErrAlreadyRan, ErrQuarantine.
func (s *Store) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if req.Reason == "" {
		req.Reason = tickdtype.ReasonTrigger
	}
	l, err := s.s.Acquire(ctx, driver.Request{Task: req.Task, Entity: req.Entity, TTL: req.TTL, Reason: req.Reason, Tick: req.Tick, Queue: req.Queue})
	if err != nil {
		return nil, busy(err)
	}
	return wrap(l), nil
}

// Unlock revokes the lease of (task, entity) for an operator (by): its
// holder's Context is cancelled with ErrRevoked. force frees the entity at
// once instead of when the holder ends; use it only when the holder is
// known to be dead.
func (s *Store) Unlock(ctx context.Context, task, entity, by string, force bool) (tickdtype.Unlocked, error) {
	return s.s.Unlock(ctx, task, entity, by, force)
}

// Lease is a held lease. Its Context is cancelled, with a cause
// (context.Cause: ErrLost, ErrUntrusted, ErrRevoked, ErrReplaced,
// ErrClosed), the moment
// it is lost or can no longer be trusted: stop the work then.
type Lease struct {
	Task, Entity string
	// Fence increases with every grant for (Task, Entity): hand it to what
	// the work writes, so that a late writer is refused.
	Fence int64
	l     *lease.Lease
}

func wrap(l *lease.Lease) *Lease {
	return &Lease{Task: l.Task, Entity: l.Entity, Fence: l.Fence, l: l}
}

// Context is live while the lease can be trusted.
func (l *Lease) Context() context.Context { return l.l.Context() }

// TrustedUntil is when the lease stops being trusted unless renewed.
func (l *Lease) TrustedUntil() time.Time { return l.l.TrustedUntil() }

// Release gives the lease back and records the run's outcome; with next,
// it enqueues another run of the entity in the same step. A holder whose
// lease was taken over gets an error and touches nothing.
func (l *Lease) Release(ctx context.Context, o tickdtype.Finished, next *tickdtype.Next) error {
	_, err := l.l.Release(ctx, o, next)
	return err
}

// BusyError says who holds a lease that could not be acquired.
type BusyError struct {
	Holder string    // replica id of the holder
	Since  time.Time // when the holder acquired it
	Fence  int64     // the holder's fencing token
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("lease: busy (held by %s since %s, fence %d)", e.Holder, e.Since.UTC().Format(time.RFC3339), e.Fence)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// busy is err with the store's busy answer as a *BusyError.
func busy(err error) error {
	var b *lease.BusyError
	if errors.As(err, &b) {
		return &BusyError{Holder: b.Holder, Since: b.Since, Fence: b.Fence}
	}
	return err
}
