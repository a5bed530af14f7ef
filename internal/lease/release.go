package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/tickd/tickd/lease/driver"
)

// drop forgets a lease and cancels its context with cause.
func (k *keeper) drop(l *Lease, cause error) { k.dropEach(1, func(int) *Lease { return l }, cause) }

// dropEach drops n leases, the i-th at(i), under one lock of the store: a
// release batch's.
func (k *keeper) dropEach(n int, at func(int) *Lease, cause error) {
	for i := range n {
		l := at(i)
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	var ended []limitHold
	k.mu.Lock()
	for i := range n {
		l := at(i)
		ended = append(ended, l.limits...)
		l.limits = nil // given back once
		delete(k.held, l)
		k.leaveLocked(l)
	}
	k.mu.Unlock()
	k.limits.limitsEnded(ended)
	for i := range n {
		at(i).cancel(cause)
	}
}

func (s *Store) release(ctx context.Context, l *Lease, o driver.Finished, next *driver.Next) (Released, error) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		return Released{}, driver.ErrNotHeld
	}
	rep, err := s.rel.releaseOne(ctx, l, driver.ReleaseArg{Lease: l.ref(), Finished: o, Next: next})
	if err != nil { // stopped waiting: the flush drops it too, later
		s.keeper.drop(l, ErrReleased)
	}
	return released(l, rep, err)
}

// releaseThen is release, answered through then.
func (s *Store) releaseThen(l *Lease, o driver.Finished, next *driver.Next, then AfterRelease) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		then.AfterRelease(Released{}, driver.ErrNotHeld)
		return
	}
	s.rel.queueRelease(releaseReq{l: l, arg: driver.ReleaseArg{Lease: l.ref(), Finished: o, Next: next}, then: then})
}

// ReleaseBatch releases many leases with one outcome in one round trip per
// BatchSize leases, as at shutdown. The errors are in the order of ls; a lease
// taken over gets ErrNotHeld. Follow-up requests are enqueued as by Release.
func (s *Store) ReleaseBatch(ctx context.Context, ls []*Lease, o driver.Finished) ([]error, error) {
	errs := make([]error, len(ls))
	for lo := 0; lo < len(ls); lo += driver.BatchSize {
		hi := min(lo+driver.BatchSize, len(ls))
		args := make([]driver.ReleaseArg, hi-lo)
		for i, l := range ls[lo:hi] {
			args[i] = driver.ReleaseArg{Lease: s.shards.located(l, l.ref()), Finished: o}
		}
		reps, err := s.b.Release(ctx, args)
		if err == nil {
			s.rel.releaseRenamed(ctx, func(i int) *Lease { return ls[lo+i] }, args, reps)
		}
		if err != nil {
			rest := ls[lo:] // renewed no more: they expire
			s.keeper.dropEach(len(rest), func(i int) *Lease { return rest[i] }, ErrReleased)
			return nil, fmt.Errorf("release %d leases: %w", len(ls), err)
		}
		batch := ls[lo:hi]
		s.keeper.dropEach(len(batch), func(i int) *Lease { return batch[i] }, ErrReleased)
		for i, r := range reps {
			errs[lo+i] = r.Err
		}
	}
	return errs, nil
}
