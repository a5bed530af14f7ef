package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	clock       Clock
	nonce       string
	seq         atomic.Uint64
	sweeping    atomic.Bool // true while a sweep runs
	ackFailures atomic.Int64
	releasers   sync.Map // task → *releaser
	host        string   // this host's name, announced
	// quarantineEnd is when the data-loss quarantine last found ends (Unix
	// ns, by this process's clock); zero when none was found.
	quarantineEnd atomic.Int64

	mu     sync.Mutex
	maxTTL time.Duration    // Options.MaxTTL, raised by CoverTTL
	ackErr *driver.AckError // while lease writes are not acknowledged
	held   map[*Lease]struct{}
	wake   chan struct{}
	wakeAt time.Time // when the keeper plans to wake; zero while it works
	closed bool
	done   chan struct{}
	stop   context.CancelFunc
}

// New returns a Store over a driver: memdriver.New() for leases in this
// process (NewMemory), the Redis driver for leases shared by replicas
// (NewRedis), or a driver of your own that passes the conformance suite.
// The Store configures the driver and starts its keeper. Close the Store
// when done.
func New(b driver.Driver, opts Options) *Store {
	opts.fill()
	var n [8]byte
	rand.Read(n[:]) //nolint:errcheck // crypto/rand never fails on Linux
	ctx, stop := context.WithCancel(context.Background())
	s := &Store{
		b: b, opts: opts, clock: opts.Clock, nonce: hex.EncodeToString(n[:]),
		maxTTL: opts.MaxTTL, held: map[*Lease]struct{}{}, wake: make(chan struct{}, 1), host: hostname(),
		done: make(chan struct{}), stop: stop,
	}
	b.Configure(driver.Config{Replica: opts.Replica, StateTTL: opts.StateTTL, Clock: opts.Clock, MaxTTL: s.MaxTTL})
	go s.keep(ctx)
	go s.watchLoss(ctx)
	return s
}

// Driver is the driver the store runs on.
func (s *Store) Driver() driver.Driver { return s.b }

// Replica is the holder id this store records.
func (s *Store) Replica() string { return s.opts.Replica }

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

// Close stops the keeper and cancels the context of every lease still held
// (cause ErrClosed). It does not release them: callers release first. A
// lease still held stays in the backend until its TTL passes; Close reports
// how many there were with ErrStillHeld.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ls := make([]*Lease, 0, len(s.held))
	for l := range s.held {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	s.stop()
	<-s.done
	for _, l := range ls {
		s.drop(l, ErrClosed)
	}
	if len(ls) > 0 {
		return fmt.Errorf("%w: %d leases", ErrStillHeld, len(ls))
	}
	return nil
}

// InitEpoch declares that this Redis holds no lease any process could still
// trust, so the data-loss quarantine does not apply to it. Use it only on a
// Redis that is new to tickd (tests, a fresh deployment); after a real data
// loss, let the quarantine run its course. Nothing for a driver that cannot
// lose its data.
func (s *Store) InitEpoch(ctx context.Context) error {
	if d, ok := s.b.(interface{ InitEpoch(context.Context) error }); ok {
		return d.InitEpoch(ctx)
	}
	return nil
}
