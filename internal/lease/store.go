package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Store hands out leases and keeps them alive. One Store per process: its
// keeper renews every lease it holds in one round every TTL/3.
type Store struct {
	b           driver.Driver
	opts        Options
	clock       driver.Clock
	nonce       string
	seq         atomic.Uint64
	sweeping    atomic.Bool // true while a sweep runs
	ackFailures atomic.Int64
	releasers   sync.Map // task's shard (driver.ShardName) → *releaser
	host        string   // this host's name, announced
	// quarantineEnd is when the data-loss quarantine last found ends (Unix
	// ns, by this process's clock); zero when none was found.
	quarantineEnd atomic.Int64

	shards shardCounts // by task (shards.go)
	limits limits      // by name (limits.go)

	mu      sync.Mutex
	maxTTL  time.Duration    // Options.MaxTTL, raised by CoverTTL
	ackErr  *driver.AckError // while lease writes are not acknowledged
	held    map[*Lease]struct{}
	wake    chan struct{}
	wakeAt  time.Time // when the keeper plans to wake; zero while it works
	started bool      // Start ran, or the first grant started the store
	closed  bool      // Stop ran
	done    chan struct{}
	stop    context.CancelFunc
}

// New returns a Store over a driver, which the caller builds:
// memdriver.New() for leases in this process, redisdriver.New(client,
// prefix, acks) for leases shared by replicas, or a driver of your own
// that passes the conformance suite (lease imports no driver).
// New configures the driver and starts nothing: Start starts the store's
// work, Stop ends it.
func New(b driver.Driver, opts Options) *Store {
	opts.fill()
	var n [8]byte
	rand.Read(n[:]) //nolint:errcheck // crypto/rand never fails on Linux
	s := &Store{
		b: b, opts: opts, clock: opts.Clock, nonce: hex.EncodeToString(n[:]),
		maxTTL: opts.MaxTTL, held: map[*Lease]struct{}{}, wake: make(chan struct{}, 1), host: hostname(),
		done: make(chan struct{}),
	}
	s.limits.wake = make(chan struct{}, 1)
	b.Configure(driver.Config{Replica: opts.Replica, Holder: s.limitHolder(), StateTTL: opts.StateTTL, Clock: opts.Clock, MaxTTL: s.MaxTTL})
	return s
}

// Start starts the store's work: the keeper, which renews the leases held
// and sweeps what outlived Options.StateTTL, and the watch for a data loss
// (LossWatch), which starts the quarantine from the moment of the loss. A
// store that was not started starts itself at its first grant, so that no
// lease goes unrenewed; a store that only reads (status, the console)
// needs no Start. ctx bounds the start only: the store runs until Stop.
// Start after Stop returns ErrClosed.
func (s *Store) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.startLocked()
	return nil
}

// startLocked starts the store's goroutines once; s.mu is held.
func (s *Store) startLocked() {
	if s.started {
		return
	}
	s.started = true
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.keep(ctx)
	go s.watchLoss(ctx)
	go s.settleLimits(ctx)
	if w, ok := s.b.(driver.RevocationWatcher); ok {
		w.WatchRevocations(ctx, s.revokedElsewhere)
	}
}

// Driver is the driver the store runs on.
func (s *Store) Driver() driver.Driver { return s.b }

// Replica is the holder id this store records.
func (s *Store) Replica() string { return s.opts.Replica }

// Process names this store among the processes of its replica id: its
// nonce, which changes at every start (TickPart.Process).
func (s *Store) Process() string { return s.nonce[:8] }

// MaxTTL is the longest lease TTL the store's data-loss quarantine covers:
// Options.MaxTTL, or more since CoverTTL.
func (s *Store) MaxTTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxTTL
}

// CoverTTL makes the data-loss quarantine cover leases of ttl: after Redis
// lost its data, nothing is granted for the longest TTL in use, so no
// holder can still trust a lease Redis forgot. It only raises the bound
// set at open (Options.MaxTTL). The scheduler calls it with its config's
// longest lease_ttl, at start (for a store opened without it) and at each
// reload.
func (s *Store) CoverTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxTTL = max(s.maxTTL, ttl)
}

// Stop stops the keeper and cancels the context of every lease still held
// (cause ErrClosed), then closes Options.Closer. It does not release the
// leases: callers release first. A lease still held stays in the backend
// until its TTL passes; Stop reports how many there were with
// ErrStillHeld. It waits for the keeper's round in flight to end, or for
// ctx. A second Stop does nothing.
func (s *Store) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	ls := make([]*Lease, 0, len(s.held))
	for l := range s.held {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var errs []error
	if started {
		s.stop()
		select {
		case <-s.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("lease store: stopping its keeper: %w", ctx.Err()))
		}
	}
	for _, l := range ls {
		s.drop(l, ErrClosed)
	}
	s.settle(ctx, false) // the runs that ended count no more
	if len(ls) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d leases", ErrStillHeld, len(ls)))
	}
	if s.opts.Closer != nil {
		errs = append(errs, s.opts.Closer.Close())
	}
	return errors.Join(errs...)
}

// InitEpoch declares that this Redis holds no lease any process could still
// trust, so the data-loss quarantine does not apply to it. Use it only on a
// Redis that is new to tickd (tests, a fresh deployment); after a real data
// loss, let the quarantine run its course. Nothing for a driver that cannot
// lose its data.
func (s *Store) InitEpoch(ctx context.Context) error {
	if d, ok := s.b.(driver.Admin); ok {
		return d.InitEpoch(ctx)
	}
	return nil
}
