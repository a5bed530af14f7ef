package lease

import (
	"context"
	"errors"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// LossWatch is how often a store looks for a data loss (a bucket whose
// epoch is gone), so that the quarantine is counted from the loss for every
// task, whether or not it ticks then.
const LossWatch = time.Second

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
		left, err := s.b.CheckEpochs(cctx)
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
			at := l.renewAt
			ttl := l.d.TTL
			l.mu.Unlock()
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
		if mine, err := s.b.Claim(sctx, "sweep", every); err != nil || !mine {
			return // another replica sweeps; or Redis fails, and the next interval retries
		}
		s.b.Sweep(sctx) //nolint:errcheck // retried at the next interval
		if s.opts.OnSweep != nil {
			s.opts.OnSweep()
		}
	}()
}

// Sweep forgets at once the entities neither held nor touched within
// Options.StateTTL; the store also does it by itself every StateTTL/10 (at
// most every hour).
func (s *Store) Sweep(ctx context.Context) error { return s.b.Sweep(ctx) }

func (s *Store) renewRound(ctx context.Context, ls []*Lease) {
	shortest := ls[0].d.TTL
	for _, l := range ls {
		shortest = min(shortest, l.d.TTL)
	}
	// The round is waited for until its leases' trust ends, not less: an
	// answer however late moves a window from when the round was sent, and
	// a round given up early (at TTL/3, as it once was) left its retry,
	// paced, past the window of every lease of a loaded replica's first
	// tick (TestSlowRenewalIsWaitedFor).
	sent := s.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, max(trustedUntil(ls, sent.Add(shortest)).Sub(sent), 50*time.Millisecond))
	defer cancel()
	ok, err := s.renew(rctx, ls)
	s.noteAcks(err)
	if err != nil {
		if s.opts.OnRenewError != nil && ctx.Err() == nil && !errors.Is(err, driver.ErrNotAcknowledged) {
			s.opts.OnRenewError(err) // a shortfall of acknowledgements is OnAcks's to report
		}
		for _, l := range ls {
			l.mu.Lock()
			l.failures++
			// Retry soon, but never spin: a tenth of the TTL.
			l.renewAt = s.clock.Now().Add(max(l.d.TTL/10, 10*time.Millisecond))
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
		switch ok[i] {
		case driver.RenewLost:
			s.drop(l, ErrLost)
			continue
		case driver.RenewRevoked:
			s.drop(l, ErrRevoked)
			continue
		}
		l.mu.Lock()
		l.failures = 0
		if !l.released {
			l.trusted = trustEnd(sent, l.d.TTL)
			l.renewAt = sent.Add(l.d.TTL / 3)
			l.renewals++
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

// renew sends one renewal round for ls, each lease where its shard is now
// (Store.where): once more where a reshard moved them when the driver
// refused the round as named by an old count.
func (s *Store) renew(ctx context.Context, ls []*Lease) ([]driver.Renewal, error) {
	refs := make([]*driver.Lease, len(ls))
	for i, l := range ls {
		refs[i] = s.renewing(l)
	}
	ok, err := s.b.Renew(ctx, refs)
	if !errors.Is(err, driver.ErrShardsChanged) {
		return ok, err
	}
	if err := s.refresh(ctx, changedTasks(len(ls), func(int) error { return err }, func(i int) string { return ls[i].Task })...); err != nil {
		return nil, err
	}
	for i, l := range ls {
		refs[i] = s.renewing(l)
	}
	return s.b.Renew(ctx, refs)
}

// trustedUntil is the earliest end of ls's trust windows, or until if
// that is earlier.
func trustedUntil(ls []*Lease, until time.Time) time.Time {
	for _, l := range ls {
		l.mu.Lock()
		if l.trusted.Before(until) {
			until = l.trusted
		}
		l.mu.Unlock()
	}
	return until
}
