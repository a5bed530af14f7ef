package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// keeper keeps the leases a store holds: it renews them in rounds (keep),
// watches their trust windows (trust.go), and drops them, cancelling their
// runs, when they are released, lost, revoked, untrusted, or the store
// stops. mu guards the leases held, the trust groups (Lease.group/slot)
// and closed; the store takes its own mutex before mu, never after.
type keeper struct {
	b      driver.Driver
	clock  driver.Clock
	opts   *Options
	shards *shardCounts
	limits *limits
	acks   *acks // follows the acknowledgements of a renewal round

	sweeping atomic.Bool // true while a sweep runs
	mu       sync.Mutex
	held     map[*Lease]struct{}
	wake     chan struct{}
	wakeAt   time.Time // when the keeper plans to wake; zero while it works
	closed   bool      // the store stopped: no lease is held from then on
	done     chan struct{}
}

// hold registers ls, granted by one request sent at sent, and watches
// their trust windows, unless the store was stopped: it says whether it
// did. The keeper is woken only when one is due for renewal before it
// planned to wake.
func (k *keeper) hold(ls []*Lease, sent time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	wake := false
	for _, l := range ls {
		k.held[l] = struct{}{}
		wake = wake || k.wakeAt.IsZero() || l.renewAt.Before(k.wakeAt)
	}
	k.watchAllLocked(sent, ls)
	if wake {
		k.poke()
	}
	return true
}

// close stops holding leases, and returns those held; already, when an
// earlier close did, none.
func (k *keeper) close() (ls []*Lease, already bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, true
	}
	k.closed = true
	ls = make([]*Lease, 0, len(k.held))
	for l := range k.held {
		ls = append(ls, l)
	}
	return ls, false
}

// isClosed says whether the store stopped.
func (k *keeper) isClosed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

// quarantine is the store's quarantine after a data loss: when the last
// one found ends.
type quarantine struct {
	b     driver.Driver
	clock driver.Clock
	// end is when the quarantine last found ends (Unix ns, by this
	// process's clock); zero when none was found.
	end atomic.Int64
}

// LossWatch is how often a store looks for a data loss (a bucket whose
// epoch is gone), so that the quarantine is counted from the loss for every
// task, whether or not it ticks then.
const LossWatch = time.Second

// watchLoss looks for a data loss every LossWatch: a Redis that restarted
// empty, or a Cluster shard that lost its data, gets every bucket's epoch
// back at once, quarantined from that moment. Without it, a bucket would be
// found empty only by its next grant, however late, and a task that ticks
// an hour after the loss would lose that tick to a quarantine of its own.
func (q *quarantine) watchLoss(ctx context.Context) {
	t := time.NewTicker(LossWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, LossWatch)
		left, err := q.b.CheckEpochs(cctx)
		cancel()
		if err == nil && left > 0 {
			q.quarantinedFor(left)
		}
	}
}

// quarantinedFor notes a quarantine found with left to go.
func (q *quarantine) quarantinedFor(left time.Duration) {
	end := q.clock.Now().Add(left).UnixNano()
	for {
		old := q.end.Load()
		if old >= end || q.end.CompareAndSwap(old, end) {
			return
		}
	}
}

// Quarantine is how long the data-loss quarantine this store last found
// (by an acquire, or by looking for a loss every LossWatch) still lasts;
// zero when none is going on.
func (s *Store) Quarantine() time.Duration {
	end := s.quarantine.end.Load()
	if end == 0 {
		return 0
	}
	return max(0, time.Unix(0, end).Sub(s.clock.Now()))
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// keep is the keeper: it renews, in one pipelined round, every held lease
// whose renewal is due (or nearly due, so that rounds are shared).
func (k *keeper) keep(ctx context.Context) {
	defer close(k.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	sweepEvery := min(k.opts.StateTTL/10, time.Hour)
	nextSweep := k.clock.Now().Add(sweepEvery)
	for {
		now := k.clock.Now()
		if !now.Before(nextSweep) {
			nextSweep = now.Add(sweepEvery)
			k.sweepAsync(ctx, sweepEvery)
		}
		var due []*Lease
		next := nextSweep
		k.mu.Lock()
		for l := range k.held {
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
		k.wakeAt = next
		if len(due) > 0 {
			k.wakeAt = time.Time{}
		}
		k.mu.Unlock()
		if len(due) > 0 {
			k.renewRound(ctx, due)
			continue
		}
		t.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		case <-t.C:
		}
	}
}

// sweepAsync bounds what the store keeps (Options.StateTTL), off the
// renewal path: once per interval, by the first replica to claim it; a
// sweep still going skips the next one.
func (k *keeper) sweepAsync(ctx context.Context, every time.Duration) {
	if !k.sweeping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer k.sweeping.Store(false)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if mine, err := k.b.Claim(sctx, "sweep", every); err != nil || !mine {
			return // another replica sweeps; or Redis fails, and the next interval retries
		}
		k.b.Sweep(sctx) //nolint:errcheck // retried at the next interval
		if k.opts.OnSweep != nil {
			k.opts.OnSweep()
		}
	}()
}

func (k *keeper) renewRound(ctx context.Context, ls []*Lease) {
	shortest := ls[0].d.TTL
	for _, l := range ls {
		shortest = min(shortest, l.d.TTL)
	}
	// The round is waited for until its leases' trust ends, not less: an
	// answer however late moves a window from when the round was sent, and
	// a round given up early (at TTL/3, as it once was) left its retry,
	// paced, past the window of every lease of a loaded replica's first
	// tick (TestSlowRenewalIsWaitedFor).
	sent := k.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, max(trustedUntil(ls, sent.Add(shortest)).Sub(sent), 50*time.Millisecond))
	defer cancel()
	ok, err := k.renew(rctx, ls)
	k.acks.note(err)
	if err != nil {
		if k.opts.OnRenewError != nil && ctx.Err() == nil && !errors.Is(err, driver.ErrNotAcknowledged) {
			k.opts.OnRenewError(err) // a shortfall of acknowledgements is OnAcks's to report
		}
		for _, l := range ls {
			l.mu.Lock()
			l.failures++
			// Retry soon, but never spin: a tenth of the TTL.
			l.renewAt = k.clock.Now().Add(max(l.d.TTL/10, 10*time.Millisecond))
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
	if k.opts.OnRenew != nil {
		k.opts.OnRenew()
	}
	renewed := make([]*Lease, 0, len(ls))
	for i, l := range ls {
		switch ok[i] {
		case driver.RenewLost:
			k.drop(l, ErrLost)
			continue
		case driver.RenewRevoked:
			k.drop(l, ErrRevoked)
			continue
		case driver.RenewReplaced:
			k.drop(l, ErrReplaced)
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
	k.mu.Lock()
	defer k.mu.Unlock()
	still := renewed[:0]
	for _, l := range renewed {
		if _, ok := k.held[l]; ok {
			still = append(still, l)
		}
	}
	if len(still) > 0 {
		k.watchAllLocked(sent, still)
	}
}

// renew sends one renewal round for ls, each lease where its shard is now
// (Store.where): once more where a reshard moved them when the driver
// refused the round as named by an old count.
func (k *keeper) renew(ctx context.Context, ls []*Lease) ([]driver.Renewal, error) {
	refs := make([]*driver.Lease, len(ls))
	for i, l := range ls {
		refs[i] = k.shards.renewing(l)
	}
	ok, err := k.b.Renew(ctx, refs)
	if !errors.Is(err, driver.ErrShardsChanged) {
		return ok, err
	}
	if err := k.shards.refresh(ctx, changedTasks(len(ls), func(int) error { return err }, func(i int) string { return ls[i].Task })...); err != nil {
		return nil, err
	}
	for i, l := range ls {
		refs[i] = k.shards.renewing(l)
	}
	return k.b.Renew(ctx, refs)
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
