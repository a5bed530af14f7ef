package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Acquire asks for one lease. It fails with a *BusyError, an
// *AlreadyRanError, a *QuarantineError, or an I/O error.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (*Lease, error) {
	r := s.AcquireBatch(ctx, []driver.Request{req})
	return r[0].Lease, r[0].Err
}

// AcquireBatch asks for many leases in as few round trips as it can (one per
// BatchSize requests). Results are in the order of reqs.
func (s *Store) AcquireBatch(ctx context.Context, reqs []driver.Request) []Result {
	out := make([]Result, len(reqs))
	for lo := 0; lo < len(reqs); lo += driver.BatchSize {
		hi := min(lo+driver.BatchSize, len(reqs))
		s.acquireRound(ctx, reqs[lo:hi], out[lo:hi])
		s.acquireRenamed(ctx, reqs[lo:hi], out[lo:hi])
		s.acquireAfterOwnReleases(ctx, reqs[lo:hi], out[lo:hi])
	}
	return out
}

// acquireAfterOwnReleases asks once more, once its release landed, for an
// entity refused as busy with a run of this store whose release was on its
// way (AwaitOwnRelease): a fan-out's. So is an entity refused as busy with
// this store's name whose lease this store no longer holds: its release
// landed after Redis refused and before the store looked (or the lease is
// a former process's of the same name, and is refused again). A request
// that left a follow-up (Queue, Replace) is not asked again: it runs after the
// release, as the follow-up; nor is a due entry's (From), whose requests
// the refusal answered: the scheduler waits for its own release before it
// asks for one.
func (s *Store) acquireAfterOwnReleases(ctx context.Context, reqs []driver.Request, out []Result) {
	var idx []int
	var again []driver.Request
	// Made at the first busy refusal of this store's: the releases on
	// their way first, then the leases held, which a release leaves only
	// once it landed and before it is no longer on its way, so that an
	// entity's lease is in one of them until its release landed.
	var own, holding map[[2]string]struct{}
	for i := range out {
		if out[i].Err == nil || reqs[i].Queue || reqs[i].Replace || reqs[i].From != nil {
			continue
		}
		// refusal's, as it is: a type assertion, not errors.As, whose
		// target would be allocated for every request of the batch.
		if be, ok := out[i].Err.(*BusyError); !ok || be.Holder != s.opts.Replica {
			continue
		}
		// Found first, for all of them, and only then waited for: a wait
		// lets the other releases land too.
		if own == nil {
			own = s.rel.ownReleases()
			holding = s.keeper.heldEntities()
		}
		key := [2]string{taskOf(reqs[i].Task), reqs[i].Entity}
		_, onItsWay := own[key]
		if _, held := holding[key]; onItsWay || !held {
			r := reqs[i]
			r.Chunk = "" // asked alone: its chunk was taken by the call that refused it
			idx, again = append(idx, i), append(again, r)
		}
	}
	if len(again) == 0 {
		return
	}
	// One deadline for the batch's waits, not one each.
	wctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	for _, r := range again {
		s.AwaitOwnRelease(wctx, r.Task, r.Entity)
	}
	cancel()
	res := make([]Result, len(again))
	s.acquireRound(ctx, again, res)
	for k, i := range idx {
		out[i] = res[k]
	}
}

// acquireRenamed asks once more for the requests the driver refused as
// named by an old shard count (a reshard), once the counts are read again.
func (s *Store) acquireRenamed(ctx context.Context, reqs []driver.Request, out []Result) {
	changed := changedTasks(len(out), func(i int) error { return out[i].Err }, func(i int) string { return reqs[i].Task })
	if len(changed) == 0 {
		return
	}
	if err := s.shards.refresh(ctx, changed...); err != nil {
		for i := range out {
			if errors.Is(out[i].Err, driver.ErrShardsChanged) {
				out[i].Err = fmt.Errorf("acquire lease: %w", err)
			}
		}
		return
	}
	var idx []int
	var again []driver.Request
	for i := range out {
		if errors.Is(out[i].Err, driver.ErrShardsChanged) {
			idx, again = append(idx, i), append(again, reqs[i])
		}
	}
	res := make([]Result, len(again))
	s.acquireRound(ctx, again, res)
	for k, i := range idx {
		out[i] = res[k]
	}
}

// acquireRound acquires at most BatchSize requests in one round trip (a
// "chunk" is something else: 16 or 32 entities of a tick's stream,
// lease/doc.go).
func (s *Store) acquireRound(ctx context.Context, reqs []driver.Request, out []Result) {
	args := make([]driver.AcquireArg, len(reqs))
	gen := s.shards.gen.Load() // before the shards are named: a refresh after them names the leases anew
	reqs, ns, bad := s.shards.sharded(ctx, reqs)
	holds, bad := s.limits.takeLimits(ctx, reqs, bad)
	defer s.limits.giveBackUnused(ctx, holds, out)
	for i := range reqs {
		r := &reqs[i]
		if bad != nil && bad[i] != nil {
			out[i].Err = bad[i]
			continue
		}
		if r.TTL <= 0 {
			out[i].Err = fmt.Errorf("lease: acquire %s/%s: ttl must be positive", r.Task, r.Entity)
			continue
		}
		args[i] = driver.AcquireArg{Req: r, Shards: ns[i]}
	}
	for i, t := range s.tok.tokens(len(args), chunkPositions(args)) {
		if args[i].Req != nil {
			args[i].Token = t
		}
	}
	if s.keeper.isClosed() {
		for i := range out {
			out[i].Err = ErrClosed
		}
		return
	}
	sent := s.clock.Now()
	replies, err := s.b.Acquire(ctx, args)
	s.acks.note(err)
	var ackErr *driver.AckError
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
		if rep.Err != nil {
			out[i].Err = fmt.Errorf("acquire lease: %w", rep.Err)
			continue
		}
		switch rep.Status {
		case driver.GrantOK:
			out[i].Lease = s.newLease(a, rep.Fence, sent)
			out[i].Lease.gen = gen
			if holds != nil {
				out[i].Lease.limits = holds[i]
			}
			granted = append(granted, out[i].Lease)
		default:
			out[i].Err = s.refused(a, rep)
		}
	}
	if len(granted) > 0 {
		s.hold(granted, sent)
	}
}

// refused is the error of an acquire reply that granted nothing; a
// holder the acquire replaced that this store holds is stopped at once.
func (s *Store) refused(a driver.AcquireArg, rep driver.AcquireReply) error {
	if rep.Replaced {
		s.keeper.revokedHere(a.Req.Task, a.Req.Entity, rep.Fence, driver.Replaced)
	}
	return refusal(a, rep, &s.quarantine)
}

// refusal is the error of an acquire reply that granted nothing; a
// quarantine it tells of is noted in q.
func refusal(a driver.AcquireArg, rep driver.AcquireReply, q *quarantine) error {
	switch rep.Status {
	case driver.GrantBusy:
		return &BusyError{Holder: rep.Holder, Since: rep.At, Fence: rep.Fence, Queued: a.Req.Queue || a.Req.Replace, Replaced: rep.Replaced,
			Dropped: rep.Dropped, Missed: rep.Missed}
	case driver.GrantRan:
		return &AlreadyRanError{LastTick: rep.At}
	case driver.GrantQuarantine:
		q.quarantinedFor(rep.Left)
		return &QuarantineError{Left: rep.Left}
	case driver.GrantEarly:
		return &EarlyError{Wait: rep.Left}
	}
	return fmt.Errorf("lease: unexpected acquire reply %q", rep.Status)
}

// handBack answers a batch whose grants the replicas did not acknowledge:
// nothing may start under them. Each grant is released at once, its run
// recorded as canceled and handed over (a due entry, after a second, with
// the request's reason and tick) so that it happens once the replicas
// acknowledge again; the other answers stand.
func (s *Store) handBack(ctx context.Context, args []driver.AcquireArg, replies []driver.AcquireReply, out []Result, ackErr *driver.AckError, sent time.Time) {
	var rs []driver.ReleaseArg
	var ls []*Lease
	for i, rep := range replies {
		if out[i].Err != nil {
			continue
		}
		if rep.Err != nil {
			out[i].Err = fmt.Errorf("acquire lease: %w", rep.Err)
			continue
		}
		if rep.Status != driver.GrantOK {
			out[i].Err = refusal(args[i], rep, &s.quarantine)
			continue
		}
		out[i].Err = fmt.Errorf("lease %s/%s: %w", taskOf(args[i].Req.Task), args[i].Req.Entity, ackErr)
		l := s.newLease(args[i], rep.Fence, sent)
		next := &driver.Next{Reason: driver.ReasonRetry, Delay: handBackDelay, Attempt: l.Attempt, HandOver: true}
		if d := args[i].Req.From; d != nil {
			next.Reason = d.Reason
		}
		ls = append(ls, l)
		rs = append(rs, driver.ReleaseArg{Lease: l.ref(), Finished: driver.Finished{Outcome: driver.OutcomeCanceled, Started: sent, Ended: s.clock.Now()}, Next: next})
	}
	if len(rs) == 0 {
		return
	}
	// Best effort: a grant not released expires after its TTL, and a due
	// entry not handed back returns after its visibility timeout.
	s.b.Release(ctx, rs) //nolint:errcheck
	for _, l := range ls {
		l.cancel(ackErr)
	}
}

// handBackDelay is how soon a grant the replicas did not acknowledge is
// tried again.
const handBackDelay = time.Second

// acks follows whether the replicas acknowledge lease writes.
type acks struct {
	onAcks   func(error)  // Options.OnAcks
	failures atomic.Int64 // the writes refused
	mu       sync.Mutex
	err      *driver.AckError // while lease writes are not acknowledged
}

// note follows whether the replicas acknowledge lease writes: err is a
// backend answer to a write that waited for them. onAcks hears of each
// change, and failures counts the writes refused.
func (a *acks) note(err error) {
	var ae *driver.AckError
	failing := errors.As(err, &ae)
	if !failing && err != nil {
		return // no answer: nothing learnt about the replicas
	}
	if failing {
		a.failures.Add(1)
	}
	a.mu.Lock()
	changed := (a.err != nil) != failing
	a.err = ae
	a.mu.Unlock()
	switch {
	case !changed || a.onAcks == nil:
	case failing:
		a.onAcks(ae)
	default:
		a.onAcks(nil) // not a nil *AckError
	}
}

// AckFailures counts the lease writes (a batch's grants, a renewal round, a
// due entry) that the replicas did not acknowledge in time.
func (s *Store) AckFailures() int64 { return s.acks.failures.Load() }

// AckErr is the last acknowledgement failure while lease writes are not
// acknowledged, or nil.
func (s *Store) AckErr() error {
	s.acks.mu.Lock()
	defer s.acks.mu.Unlock()
	if s.acks.err == nil {
		return nil
	}
	return s.acks.err
}

func (s *Store) newLease(a driver.AcquireArg, fence int64, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		Task: taskOf(a.Req.Task), Entity: a.Req.Entity, Reason: a.Req.Reason, Fence: fence,
		Acquired: sent, store: s,
		d:   driver.Lease{Task: a.Req.Task, Entity: a.Req.Entity, Token: a.Token, TTL: a.Req.TTL, Shards: a.Shards},
		ctx: ctx, cancel: cancel,
	}
	if a.Req.Reason == driver.ReasonTick || driver.ByRecord(a.Req.Reason) {
		l.Tick = a.Req.Tick
	}
	if d := a.Req.From; d != nil {
		l.Attempt, l.Requests = d.Attempt, d.Requests
		if l.Tick.IsZero() {
			l.Tick = d.Tick
		}
	}
	l.trusted = trustEnd(sent, l.d.TTL)
	l.renewAt = sent.Add(l.d.TTL / 3)
	return l
}

// hold hands leases granted by one request, sent at sent, to the keeper.
// Leases granted while the store was being stopped are dropped at once, as
// Stop drops the others.
func (s *Store) hold(ls []*Lease, sent time.Time) {
	s.mu.Lock()
	held := s.keeper.hold(ls, sent)
	if held {
		s.startLocked() // a store not started starts at its first grant
	}
	s.mu.Unlock()
	if !held {
		for _, l := range ls {
			s.keeper.drop(l, ErrClosed)
		}
	}
}

// Taken says, for each of chunks (Request.Chunk) of tick of task (or of
// one of its shards, by the driver's name: ShardName), whether a
// fan-out took it already: the leases of its entities were granted then, in
// the step that took it, so a fan-out that sent it now would get
// ErrAlreadyRan for all of it. A fan-out that skipped part of the stream
// asks this before it comes back to that part. The in-process store takes
// no chunks: it answers false for each.
func (s *Store) Taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error) {
	if len(chunks) == 0 {
		return nil, nil
	}
	t, err := s.b.Taken(ctx, task, tick, chunks)
	if err != nil {
		return nil, fmt.Errorf("taken chunks of %s: %w", task, err)
	}
	return t, nil
}
