package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// backend is what differs between Redis and the in-process store. Every
// method is one round trip.
type backend interface {
	// acquire asks for leases; maxTTL is the quarantine after a data loss.
	acquire(ctx context.Context, holder string, maxTTL time.Duration, reqs []acquireArg) ([]acquireReply, error)
	renew(ctx context.Context, ls []*Lease) ([]renewal, error)
	// release returns, per lease, whether a follow-up had been requested,
	// or ErrNotHeld.
	release(ctx context.Context, rs []releaseArg) ([]releaseReply, error)
	enqueue(ctx context.Context, d Due, delay time.Duration) error
	take(ctx context.Context, limit int, visibility time.Duration, claimPrefix string) ([]Due, error)
	// ack removes a taken due entry and answers its requests AnswerDropped.
	ack(ctx context.Context, d Due) error
	// answers reads a request's answers by entity; forget deletes them.
	answers(ctx context.Context, task, id string) (map[string]Outcome, error)
	forget(ctx context.Context, task, id string) error
	// unlock revokes (force false) or frees the lease of (task, entity).
	unlock(ctx context.Context, task, entity, by string, force bool) (Unlocked, bool, error)
	leases(ctx context.Context, task string, fn func(Held) error) error
	lastRuns(ctx context.Context, task string, fn func(LastRun) error) error
	dueEntries(ctx context.Context, task string, fn func(Due) error) error
	dueCount(ctx context.Context) (int, error)
	// entityPage reads one page of a task's entities.
	entityPage(ctx context.Context, task string, q PageQuery) (Page, error)
	// one reads the state of one entity.
	one(ctx context.Context, task, entity string) (EntityState, error)
	// setPaused pauses task with info (PauseInfo, encoded), or resumes it
	// for info "".
	setPaused(ctx context.Context, task, info string) error
	// paused returns the paused tasks' infos.
	paused(ctx context.Context) (map[string]string, error)
	// registerTasks, registry and forgetTask keep the task registry: task
	// name → TaskInfo, encoded.
	registerTasks(ctx context.Context, vals map[string]string) error
	registry(ctx context.Context) (map[string]string, error)
	forgetTask(ctx context.Context, task string) (bool, error)
	// recordTicks puts parts in their tick records, enforcing each one's
	// retention (tick.lua).
	recordTicks(ctx context.Context, ws []TickWrite) error
	// ticks returns task's newest tick records (encoded), newest first.
	ticks(ctx context.Context, task string, limit int) ([]string, error)
	// push adds values to tasks' lists (listFailures, listActions), each
	// cut to its keep.
	push(ctx context.Context, list string, ps []*listPush) error
	// list returns task's newest values of list, newest first.
	list(ctx context.Context, list, task string, limit int) ([]string, error)
	// histories returns, for each read, its task's newest tick records
	// and actions (encoded, newest first), in one round trip.
	histories(ctx context.Context, reads []HistoryRead) (ticks, actions [][]string, err error)
	// announce records the tasks this replica runs (a.Tasks), and which
	// process announces them, for ttl; a *DuplicateReplicaError when
	// another live process announced the same replica id.
	announce(ctx context.Context, a announceValue, ttl time.Duration) error
	// replicas lists the replicas whose announcement is current.
	replicas(ctx context.Context) ([]Replica, error)
	// known says whether a replica whose announcement is current runs task.
	known(ctx context.Context, task string) (bool, error)
	ping(ctx context.Context) error
	// sweep forgets the entities neither held nor touched within StateTTL.
	sweep(ctx context.Context) error
	// claimSweep says whether this replica is the one to sweep now: one
	// replica per interval, whichever asks first.
	claimSweep(ctx context.Context, every time.Duration) (bool, error)
	// taken says which of a tick's chunks (Request.Chunk) were taken.
	taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error)
	// checkEpochs finds a data loss: it gives every bucket found without an
	// epoch one, quarantined for maxTTL from now, and returns the longest
	// quarantine left. It does nothing before the store's first grant,
	// enqueue, take or announce.
	checkEpochs(ctx context.Context, maxTTL time.Duration) (time.Duration, error)
}

type acquireArg struct {
	req   *Request // the caller's
	token string
	field string // the escaped entity id
}

type releaseArg struct {
	l    *Lease
	o    Finished
	next *Next
}

type releaseReply struct {
	followUp bool
	err      error
}

// Store hands out leases and keeps them alive. One Store per process: its
// keeper renews every lease it holds in one round every TTL/3.
type Store struct {
	b           backend
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
	maxTTL time.Duration // Options.MaxTTL, raised by CoverTTL
	ackErr *AckError     // while lease writes are not acknowledged
	held   map[*Lease]struct{}
	wake   chan struct{}
	wakeAt time.Time // when the keeper plans to wake; zero while it works
	closed bool
	done   chan struct{}
	stop   context.CancelFunc
}

// newStore returns a Store over b. bind hands b the store's options before
// the keeper starts: the keeper's sweeps read them.
func newStore(b backend, opts Options, bind func(*Options)) *Store {
	opts.fill()
	var n [8]byte
	rand.Read(n[:]) //nolint:errcheck // crypto/rand never fails on Linux
	ctx, stop := context.WithCancel(context.Background())
	s := &Store{
		b: b, opts: opts, clock: opts.Clock, nonce: hex.EncodeToString(n[:]),
		maxTTL: opts.MaxTTL, held: map[*Lease]struct{}{}, wake: make(chan struct{}, 1), host: hostname(),
		done: make(chan struct{}), stop: stop,
	}
	bind(&s.opts)
	go s.keep(ctx)
	go s.watchLoss(ctx)
	return s
}

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
// holder can still trust a lease Redis forgot. The scheduler calls it with
// its config's longest lease_ttl, at start and at each reload.
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
// loss, let the quarantine run its course.
func (s *Store) InitEpoch(ctx context.Context) error {
	b, ok := s.b.(*redisBackend)
	if !ok {
		return nil
	}
	pipe := b.c.Pipeline()
	for bk := range buckets {
		pipe.SetNX(ctx, b.k.epoch(bk), epochValue{}.encode(), 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
