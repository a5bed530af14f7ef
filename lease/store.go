package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Clock reads the wall clock. Tests inject offsets through it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options configure a Store. The zero value is usable.
type Options struct {
	// Replica is this process's id, recorded as the holder. Defaults to
	// "local".
	Replica string
	// MaxTTL is the longest lease TTL in use: after Redis lost its data,
	// nothing is granted for this long. Defaults to 1m.
	MaxTTL time.Duration
	// StateTTL bounds how long per-entity state (last tick, last run,
	// follow-up flag) is kept after its last write. It must cover catch_up
	// and clock skew. Defaults to 7 days.
	StateTTL time.Duration
	// Clock defaults to the system clock.
	Clock Clock
	// OnRenewError, if set, is called with each failed renewal round (but
	// not for a round the replicas did not acknowledge: see OnAcks).
	OnRenewError func(error)
	// OnRenew, if set, is called after each successful renewal round.
	OnRenew func()
	// ReplicaAcks (Redis only) is how many replicas must have a grant or a
	// renewal before it is trusted. The zero value, AcksAuto, waits for
	// every replica the primary reports online.
	ReplicaAcks ReplicaAcks
	// OnAcks, if set, is called when lease writes stop being acknowledged
	// by the replicas (with the *AckError) and when they are again (nil).
	OnAcks func(err error)
	// Version is this program's version, announced with its tasks.
	Version string
}

// hostname is this host's name, or "unknown".
func hostname() string {
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}

func (o *Options) fill() {
	if o.Replica == "" {
		o.Replica = "local"
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = time.Minute
	}
	if o.StateTTL <= 0 {
		o.StateTTL = 7 * 24 * time.Hour
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
}

// backend is what differs between Redis and the in-process store. Every
// method is one round trip.
type backend interface {
	// acquire asks for leases; maxTTL is the quarantine after a data loss.
	acquire(ctx context.Context, holder string, maxTTL time.Duration, reqs []acquireArg) ([]acquireReply, error)
	renew(ctx context.Context, ls []*Lease) ([]bool, error)
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
	unlock(ctx context.Context, task, entity, by string) (Held, bool, error)
	leases(ctx context.Context, task string, fn func(Held) error) error
	lastRuns(ctx context.Context, task string, fn func(LastRun) error) error
	dueEntries(ctx context.Context, task string, fn func(Due) error) error
	dueCount(ctx context.Context) (int, error)
	// one reads the state of one entity.
	one(ctx context.Context, task, entity string) (EntityState, error)
	setPaused(ctx context.Context, task string, paused bool) error
	paused(ctx context.Context) (map[string]bool, error)
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
	b     backend
	opts  Options
	clock Clock
	nonce string
	seq   atomic.Uint64
	// sweeping is true while a sweep runs; swept counts the periodic sweeps
	// this store ran (tests).
	sweeping    atomic.Bool
	swept       atomic.Int64
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

// LossWatch is how often a store looks for a data loss (a bucket whose
// epoch is gone), so that the quarantine is counted from the loss for every
// task, whether or not it ticks then.
var LossWatch = time.Second

// watchLoss looks for a data loss every LossWatch: a Redis that restarted
// empty, or a Cluster shard that lost its data, gets every bucket's epoch
// back at once, quarantined from that moment. Without it, a bucket would be
// found empty only by its next grant, however late, and a task that ticks
// an hour after the loss would lose that tick to a quarantine of its own.
func (s *Store) watchLoss(ctx context.Context) {
	t := time.NewTicker(LossWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, LossWatch)
		left, err := s.b.checkEpochs(cctx, s.MaxTTL())
		cancel()
		if err == nil && left > 0 {
			s.quarantinedFor(left)
		}
	}
}

// quarantinedFor notes a quarantine found with left to go.
func (s *Store) quarantinedFor(left time.Duration) {
	end := s.clock.Now().Add(left).UnixNano()
	for {
		old := s.quarantineEnd.Load()
		if old >= end || s.quarantineEnd.CompareAndSwap(old, end) {
			return
		}
	}
}

// Quarantine is how long the data-loss quarantine this store last found
// (by an acquire, or by looking for a loss every LossWatch) still lasts;
// zero when none is going on.
func (s *Store) Quarantine() time.Duration {
	end := s.quarantineEnd.Load()
	if end == 0 {
		return 0
	}
	return max(0, time.Unix(0, end).Sub(s.clock.Now()))
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

// token returns a new token, "nonce-seq": a take's claim.
func (s *Store) token() string {
	t := s.tokens(1, nil)[0]
	return t[1 : len(t)-1]
}

// tokens returns n new lease tokens, cut from one allocation. Each is
// "|nonce-seq|": the scripts find a lease's token in its value, between the
// value's separators, with one search (lib.lua's release_fast). pos, when
// not nil, places the i-th in a chunk (chunkPositions): the j-th of a chunk
// (from 1) has the chunk's first token with ".j" before the closing
// separator, so that a backend can send a chunk's tokens as the prefix
// alone (chunkPrefix).
func (s *Store) tokens(n int, pos []int) []string {
	last := s.seq.Add(uint64(n))
	buf := make([]byte, 0, n*(len(s.nonce)+14))
	ends := make([]int, n)
	var from, to int // the current chunk's "|nonce-seq" in buf
	for i := range n {
		j := 0
		if pos != nil {
			j = pos[i]
		}
		if j <= 1 {
			from = len(buf)
			buf = append(append(buf, '|'), s.nonce...)
			buf = strconv.AppendUint(append(buf, '-'), last-uint64(n-1-i), 36)
			to = len(buf)
		} else {
			buf = append(buf, buf[from:to]...)
		}
		if j > 0 {
			buf = strconv.AppendInt(append(buf, '.'), int64(j), 10)
		}
		buf = append(buf, '|')
		ends[i] = len(buf)
	}
	return cut(buf, ends)
}

// chunkPositions places each request of args in its chunk: 1, 2, … along a
// run of two or more requests with one Request.Chunk (among those sent,
// with a req), 0 for the others; nil when no request is in one.
func chunkPositions(args []acquireArg) []int {
	var pos []int
	for i := 0; i < len(args); {
		if args[i].req == nil || args[i].req.Chunk == "" {
			i++
			continue
		}
		c, j := args[i].req.Chunk, i+1
		for j < len(args) && args[j].req != nil && args[j].req.Chunk == c {
			j++
		}
		if j-i >= 2 {
			if pos == nil {
				pos = make([]int, len(args))
			}
			for k := i; k < j; k++ {
				pos[k] = k - i + 1
			}
		}
		i = j
	}
	return pos
}

// chunkPrefix is the prefix the tokens of a chunk's requests share (all of
// a token but its position and closing separator), when tokens gave them
// their chunk positions.
func chunkPrefix(tokens func(k int) string, n int) (string, bool) {
	first := tokens(0)
	prefix, ok := strings.CutSuffix(first, ".1|")
	if !ok {
		return "", false
	}
	prefix += "."
	var num [20]byte
	for k := 1; k < n; k++ {
		t := tokens(k)
		rest, ok := strings.CutPrefix(t, prefix)
		if !ok || len(rest) < 2 || rest[len(rest)-1] != '|' || rest[:len(rest)-1] != string(strconv.AppendInt(num[:0], int64(k+1), 10)) {
			return "", false
		}
	}
	return prefix, true
}

// cut converts buf to one string and returns its pieces ending at ends: many
// short strings for the price of one allocation.
func cut(buf []byte, ends []int) []string {
	all, out := string(buf), make([]string, len(ends))
	start := 0
	for i, end := range ends {
		out[i], start = all[start:end], end
	}
	return out
}

// Acquire asks for one lease. It fails with a *BusyError, an
// *AlreadyRanError, a *QuarantineError, or an I/O error.
func (s *Store) Acquire(ctx context.Context, req Request) (*Lease, error) {
	r := s.AcquireBatch(ctx, []Request{req})
	return r[0].Lease, r[0].Err
}

// BatchSize bounds the entities one acquire or release round trip carries;
// callers that gather requests (the scheduler's fan-out) batch by it.
const BatchSize = 256

// AcquireBatch asks for many leases in as few round trips as it can (one per
// BatchSize requests). Results are in the order of reqs.
func (s *Store) AcquireBatch(ctx context.Context, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	for lo := 0; lo < len(reqs); lo += BatchSize {
		hi := min(lo+BatchSize, len(reqs))
		s.acquireChunk(ctx, reqs[lo:hi], out[lo:hi])
	}
	return out
}

func (s *Store) acquireChunk(ctx context.Context, reqs []Request, out []Result) {
	args := make([]acquireArg, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		if r.TTL <= 0 {
			out[i].Err = fmt.Errorf("lease: acquire %s/%s: ttl must be positive", r.Task, r.Entity)
			continue
		}
		args[i] = acquireArg{req: r, field: escape(r.Entity)}
	}
	for i, t := range s.tokens(len(args), chunkPositions(args)) {
		if args[i].req != nil {
			args[i].token = t
		}
	}
	s.mu.Lock()
	closed, maxTTL := s.closed, s.maxTTL
	s.mu.Unlock()
	if closed {
		for i := range out {
			out[i].Err = ErrClosed
		}
		return
	}
	sent := s.clock.Now()
	replies, err := s.b.acquire(ctx, s.opts.Replica, maxTTL, args)
	s.noteAcks(err)
	var ackErr *AckError
	if errors.As(err, &ackErr) && replies != nil {
		s.handBack(ctx, args, replies, out, ackErr, sent)
		return
	}
	if err != nil {
		for i := range out {
			if out[i].Err == nil {
				out[i].Err = fmt.Errorf("acquire lease: %w", err)
			}
		}
		return
	}
	var granted []*Lease
	for i, rep := range replies {
		if out[i].Err != nil {
			continue
		}
		a := args[i]
		switch rep.status {
		case grantOK:
			out[i].Lease = s.newLease(a, rep.fence, sent)
			granted = append(granted, out[i].Lease)
		default:
			out[i].Err = s.refusal(a, rep)
		}
	}
	if len(granted) > 0 {
		s.hold(granted, sent)
	}
}

// refusal is the error of an acquire reply that granted nothing.
func (s *Store) refusal(a acquireArg, rep acquireReply) error {
	switch rep.status {
	case grantBusy:
		return &BusyError{Holder: rep.holder, Since: rep.at, Fence: rep.fence, Queued: a.req.Queue}
	case grantRan:
		return &AlreadyRanError{LastTick: rep.at}
	case grantQuarantine:
		s.quarantinedFor(rep.left)
		return &QuarantineError{Left: rep.left}
	case grantEarly:
		return &EarlyError{Wait: rep.left}
	}
	return fmt.Errorf("lease: unexpected acquire reply %q", rep.status)
}

// handBack answers a batch whose grants the replicas did not acknowledge:
// nothing may start under them. Each grant is released at once, its run
// recorded as canceled and handed over (a due entry, after a second, with
// the request's reason and tick) so that it happens once the replicas
// acknowledge again; the other answers stand.
func (s *Store) handBack(ctx context.Context, args []acquireArg, replies []acquireReply, out []Result, ackErr *AckError, sent time.Time) {
	var rs []releaseArg
	for i, rep := range replies {
		if out[i].Err != nil {
			continue
		}
		if rep.status != grantOK {
			out[i].Err = s.refusal(args[i], rep)
			continue
		}
		out[i].Err = fmt.Errorf("lease %s/%s: %w", args[i].req.Task, args[i].req.Entity, ackErr)
		l := s.newLease(args[i], rep.fence, sent)
		next := &Next{Reason: ReasonRetry, Delay: handBackDelay, Attempt: l.Attempt, HandOver: true}
		if d := args[i].req.From; d != nil {
			next.Reason = d.Reason
		}
		rs = append(rs, releaseArg{l: l, o: Finished{Outcome: OutcomeCanceled, Started: sent, Ended: s.clock.Now()}, next: next})
	}
	if len(rs) == 0 {
		return
	}
	// Best effort: a grant not released expires after its TTL, and a due
	// entry not handed back returns after its visibility timeout.
	s.b.release(ctx, rs) //nolint:errcheck
	for _, r := range rs {
		r.l.cancel(ackErr)
	}
}

// handBackDelay is how soon a grant the replicas did not acknowledge is
// tried again.
const handBackDelay = time.Second

// noteAcks follows whether the replicas acknowledge lease writes: err is a
// backend answer to a write that waited for them. OnAcks hears of each
// change, and AckFailures counts the writes refused.
func (s *Store) noteAcks(err error) {
	var ae *AckError
	failing := errors.As(err, &ae)
	if !failing && err != nil {
		return // no answer: nothing learnt about the replicas
	}
	if failing {
		s.ackFailures.Add(1)
	}
	s.mu.Lock()
	changed := (s.ackErr != nil) != failing
	if failing {
		s.ackErr = ae
	} else {
		s.ackErr = nil
	}
	s.mu.Unlock()
	if changed && s.opts.OnAcks != nil {
		if failing {
			s.opts.OnAcks(ae)
		} else {
			s.opts.OnAcks(nil)
		}
	}
}

// AckFailures counts the lease writes (a batch's grants, a renewal round, a
// due entry) that the replicas did not acknowledge in time.
func (s *Store) AckFailures() int64 { return s.ackFailures.Load() }

// AckErr is the last acknowledgement failure while lease writes are not
// acknowledged, or nil.
func (s *Store) AckErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ackErr == nil {
		return nil
	}
	return s.ackErr
}

func (s *Store) newLease(a acquireArg, fence int64, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		Task: a.req.Task, Entity: a.req.Entity, Reason: a.req.Reason, Fence: fence,
		Acquired: sent, token: a.token, field: a.field, ttl: a.req.TTL, store: s,
		ctx: ctx, cancel: cancel,
	}
	if a.req.Reason == ReasonTick {
		l.Tick = a.req.Tick
	}
	if d := a.req.From; d != nil {
		l.Attempt, l.Requests = d.Attempt, d.Requests
		if l.Tick.IsZero() {
			l.Tick = d.Tick
		}
	}
	l.trusted = trustEnd(sent, l.ttl)
	l.renewAt = sent.Add(l.ttl / 3)
	return l
}

// hold registers leases granted by one request, sent at sent, with the
// keeper and watches their trust windows. The keeper is woken only when one
// is due for renewal before it planned to wake. Leases granted while the
// store was being closed are dropped at once, as Close drops the others.
func (s *Store) hold(ls []*Lease, sent time.Time) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, l := range ls {
			s.drop(l, ErrClosed)
		}
		return
	}
	defer s.mu.Unlock()
	wake := false
	for _, l := range ls {
		s.held[l] = struct{}{}
		wake = wake || s.wakeAt.IsZero() || l.renewAt.Before(s.wakeAt)
	}
	s.watchAllLocked(sent, ls)
	if wake {
		s.poke()
	}
}

// drop forgets a lease and cancels its context with cause.
func (s *Store) drop(l *Lease, cause error) { s.dropEach(1, func(int) *Lease { return l }, cause) }

// dropEach drops n leases, the i-th at(i), under one lock of the store: a
// release batch's.
func (s *Store) dropEach(n int, at func(int) *Lease, cause error) {
	for i := range n {
		l := at(i)
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	s.mu.Lock()
	for i := range n {
		delete(s.held, at(i))
		s.leaveLocked(at(i))
	}
	s.mu.Unlock()
	for i := range n {
		at(i).cancel(cause)
	}
}

func (s *Store) release(ctx context.Context, l *Lease, o Finished, next *Next) (Released, error) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		return Released{}, ErrNotHeld
	}
	rep, err := s.releaseOne(ctx, releaseArg{l: l, o: o, next: next})
	if err != nil { // stopped waiting: the flush drops it too, later
		s.drop(l, ErrReleased)
	}
	return released(l, rep, err)
}

// releaseThen is release, answered through then.
func (s *Store) releaseThen(l *Lease, o Finished, next *Next, then AfterRelease) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		then.AfterRelease(Released{}, ErrNotHeld)
		return
	}
	s.queueRelease(releaseReq{arg: releaseArg{l: l, o: o, next: next}, then: then})
}

// ReleaseBatch releases many leases with one outcome in one round trip per
// BatchSize leases, as at shutdown. The errors are in the order of ls; a lease
// taken over gets ErrNotHeld. Follow-up requests are enqueued as by Release.
func (s *Store) ReleaseBatch(ctx context.Context, ls []*Lease, o Finished) ([]error, error) {
	errs := make([]error, len(ls))
	for lo := 0; lo < len(ls); lo += BatchSize {
		hi := min(lo+BatchSize, len(ls))
		args := make([]releaseArg, hi-lo)
		for i, l := range ls[lo:hi] {
			args[i] = releaseArg{l: l, o: o}
		}
		reps, err := s.b.release(ctx, args)
		if err != nil {
			rest := ls[lo:] // renewed no more: they expire
			s.dropEach(len(rest), func(i int) *Lease { return rest[i] }, ErrReleased)
			return nil, fmt.Errorf("release %d leases: %w", len(ls), err)
		}
		batch := ls[lo:hi]
		s.dropEach(len(batch), func(i int) *Lease { return batch[i] }, ErrReleased)
		for i, r := range reps {
			errs[lo+i] = r.err
		}
	}
	return errs, nil
}

func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// keep is the keeper: it renews, in one pipelined round, every held lease
// whose renewal is due (or nearly due, so that rounds are shared).
func (s *Store) keep(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	sweepEvery := min(s.opts.StateTTL/10, time.Hour)
	nextSweep := s.clock.Now().Add(sweepEvery)
	for {
		now := s.clock.Now()
		if !now.Before(nextSweep) {
			nextSweep = now.Add(sweepEvery)
			s.sweepAsync(ctx, sweepEvery)
		}
		var due []*Lease
		next := nextSweep
		s.mu.Lock()
		for l := range s.held {
			l.mu.Lock()
			at, skip := l.renewAt, l.noRenewal
			ttl := l.ttl
			l.mu.Unlock()
			if skip {
				continue
			}
			if !at.After(now.Add(ttl / 6)) {
				due = append(due, l)
			} else if at.Before(next) {
				next = at
			}
		}
		s.wakeAt = next
		if len(due) > 0 {
			s.wakeAt = time.Time{}
		}
		s.mu.Unlock()
		if len(due) > 0 {
			s.renewRound(ctx, due)
			continue
		}
		t.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// sweepAsync bounds what the store keeps (Options.StateTTL), off the
// renewal path: once per interval, by the first replica to claim it; a
// sweep still going skips the next one.
func (s *Store) sweepAsync(ctx context.Context, every time.Duration) {
	if !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.sweeping.Store(false)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if mine, err := s.b.claimSweep(sctx, every); err != nil || !mine {
			return // another replica sweeps; or Redis fails, and the next interval retries
		}
		s.swept.Add(1)
		s.b.sweep(sctx) //nolint:errcheck // retried at the next interval
	}()
}

// Sweep forgets at once the entities neither held nor touched within
// Options.StateTTL; the store also does it by itself every StateTTL/10 (at
// most every hour).
func (s *Store) Sweep(ctx context.Context) error { return s.b.sweep(ctx) }

func (s *Store) renewRound(ctx context.Context, ls []*Lease) {
	shortest := ls[0].ttl
	for _, l := range ls {
		shortest = min(shortest, l.ttl)
	}
	rctx, cancel := context.WithTimeout(ctx, max(shortest/3, 50*time.Millisecond))
	defer cancel()
	sent := s.clock.Now()
	ok, err := s.b.renew(rctx, ls)
	s.noteAcks(err)
	if err != nil {
		if s.opts.OnRenewError != nil && ctx.Err() == nil && !errors.Is(err, ErrNotAcknowledged) {
			s.opts.OnRenewError(err) // a shortfall of acknowledgements is OnAcks's to report
		}
		for _, l := range ls {
			l.mu.Lock()
			l.failures++
			// Retry soon, but never spin: a tenth of the TTL.
			l.renewAt = s.clock.Now().Add(max(l.ttl/10, 10*time.Millisecond))
			l.mu.Unlock()
		}
		if ctx.Err() == nil {
			select { // pace failing rounds
			case <-ctx.Done():
			case <-time.After(max(shortest/10, 10*time.Millisecond)):
			}
		}
		return
	}
	if s.opts.OnRenew != nil {
		s.opts.OnRenew()
	}
	renewed := make([]*Lease, 0, len(ls))
	for i, l := range ls {
		if !ok[i] {
			s.drop(l, ErrLost)
			continue
		}
		l.mu.Lock()
		l.failures = 0
		if !l.released {
			l.trusted = trustEnd(sent, l.ttl)
			l.renewAt = sent.Add(l.ttl / 3)
			renewed = append(renewed, l)
		}
		l.mu.Unlock()
	}
	// Move the renewed leases still held to the round's trust groups.
	s.mu.Lock()
	defer s.mu.Unlock()
	still := renewed[:0]
	for _, l := range renewed {
		if _, ok := s.held[l]; ok {
			still = append(still, l)
		}
	}
	if len(still) > 0 {
		s.watchAllLocked(sent, still)
	}
}

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

// Unlock force-releases the lease of (task, entity), whoever holds it, and
// records who did it. It returns the lease removed, or ErrNotHeld.
func (s *Store) Unlock(ctx context.Context, task, entity, by string) (Held, error) {
	h, ok, err := s.b.unlock(ctx, task, entity, by)
	if err != nil {
		return Held{}, fmt.Errorf("unlock %s/%s: %w", task, entity, err)
	}
	if !ok {
		return Held{}, ErrNotHeld
	}
	return h, nil
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

// SetPaused pauses or resumes the ticks of task on every replica.
func (s *Store) SetPaused(ctx context.Context, task string, paused bool) error {
	return s.b.setPaused(ctx, task, paused)
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

// Paused returns the set of paused tasks.
func (s *Store) Paused(ctx context.Context) (map[string]bool, error) { return s.b.paused(ctx) }

// Announce records, for ttl, the tasks this replica runs: a replica that
// takes a due run for a task it does not know (during a config rollout)
// leaves it for one that does (Known).
//
// A *DuplicateReplicaError (after the announcement was made) says that
// another live process announced the same replica id: two replicas share a
// replica_id, and their records (holder, status) cannot be told apart.
func (s *Store) Announce(ctx context.Context, tasks []string, ttl time.Duration) error {
	a := announceValue{Tasks: tasks, Process: s.nonce, Host: s.host, Version: s.opts.Version}
	if err := s.b.announce(ctx, a, ttl); err != nil {
		var dup *DuplicateReplicaError
		if errors.As(err, &dup) {
			return err
		}
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

// stopRenewing makes the keeper leave l alone, so that it expires: tests only.
func (l *Lease) stopRenewing() {
	l.mu.Lock()
	l.noRenewal = true
	l.mu.Unlock()
}
