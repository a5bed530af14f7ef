package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Store hands out leases and keeps them alive. One Store per process: its
// keeper renews every lease it holds in one round every TTL/3.
type Store struct {
	b     driver.Driver
	opts  Options
	clock driver.Clock
	host  string // this host's name, announced

	tok        tokenSource // the leases' tokens (tokens.go)
	acks       acks        // the replicas' acknowledgements (acquire.go)
	keeper     keeper      // the leases held (keeper.go, trust.go)
	rel        releasers   // the releases on their way, by shard (releaser.go)
	quarantine quarantine  // after a data loss (keeper.go)
	shards     shardCounts // by task (shards.go)
	limits     limits      // by name (limits.go)

	mu      sync.Mutex    // taken before keeper.mu, never after
	maxTTL  time.Duration // Options.MaxTTL, raised by CoverTTL
	started bool          // Start ran, or the first grant started the store
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
	s := &Store{b: b, opts: opts, clock: opts.Clock, maxTTL: opts.MaxTTL, host: hostname()}
	s.tok.nonce = hex.EncodeToString(n[:])
	s.acks.onAcks = opts.OnAcks
	s.shards.b = b
	s.quarantine = quarantine{b: b, clock: opts.Clock}
	s.limits = limits{b: b, clock: opts.Clock, quarantined: s.quarantine.quarantinedFor, wake: make(chan struct{}, 1)}
	s.keeper = keeper{
		b: b, clock: opts.Clock, opts: &s.opts, shards: &s.shards, limits: &s.limits, acks: &s.acks,
		held: map[*Lease]struct{}{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	s.rel = releasers{b: b, shards: &s.shards, keeper: &s.keeper}
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
	if s.keeper.isClosed() {
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
	go s.keeper.keep(ctx)
	go s.quarantine.watchLoss(ctx)
	go s.limits.settleLimits(ctx)
	if w, ok := s.b.(driver.RevocationWatcher); ok {
		w.WatchRevocations(ctx, s.keeper.revokedHere)
	}
}

// Driver is the driver the store runs on.
func (s *Store) Driver() driver.Driver { return s.b }

// Replica is the holder id this store records.
func (s *Store) Replica() string { return s.opts.Replica }

// Process names this store among the processes of its replica id: its
// nonce, which changes at every start (TickPart.Process).
func (s *Store) Process() string { return s.tok.nonce[:8] }

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
	ls, already := s.keeper.close()
	started := s.started
	s.mu.Unlock()
	if already {
		return nil
	}
	var errs []error
	if started {
		s.stop()
		select {
		case <-s.keeper.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("lease store: stopping its keeper: %w", ctx.Err()))
		}
	}
	for _, l := range ls {
		s.keeper.drop(l, ErrClosed)
	}
	s.limits.settle(ctx, false) // the runs that ended count no more
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
