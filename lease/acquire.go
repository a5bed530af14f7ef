package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
		s.acquireRound(ctx, reqs[lo:hi], out[lo:hi])
	}
	return out
}

// acquireRound acquires at most BatchSize requests in one round trip (a
// "chunk" is something else: 16 entities of a tick's stream, lease/doc.go).
func (s *Store) acquireRound(ctx context.Context, reqs []Request, out []Result) {
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
