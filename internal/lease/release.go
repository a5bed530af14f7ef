package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/tickd/tickd/lease/driver"
)

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
	var ended []limitHold
	s.mu.Lock()
	for i := range n {
		l := at(i)
		ended = append(ended, l.limits...)
		l.limits = nil // given back once
		delete(s.held, l)
		s.leaveLocked(l)
	}
	s.mu.Unlock()
	s.limitsEnded(ended)
	for i := range n {
		at(i).cancel(cause)
	}
}

func (s *Store) release(ctx context.Context, l *Lease, o driver.Finished, next *driver.Next) (Released, error) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		return Released{}, driver.ErrNotHeld
	}
	rep, err := s.releaseOne(ctx, l, driver.ReleaseArg{Lease: l.ref(), Finished: o, Next: next})
	if err != nil { // stopped waiting: the flush drops it too, later
		s.drop(l, ErrReleased)
	}
	return released(l, rep, err)
}

// releaseThen is release, answered through then.
func (s *Store) releaseThen(l *Lease, o driver.Finished, next *driver.Next, then AfterRelease) {
	if errors.Is(context.Cause(l.ctx), ErrReleased) {
		then.AfterRelease(Released{}, driver.ErrNotHeld)
		return
	}
	s.queueRelease(releaseReq{l: l, arg: driver.ReleaseArg{Lease: l.ref(), Finished: o, Next: next}, then: then})
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
			args[i] = driver.ReleaseArg{Lease: s.located(l, l.ref()), Finished: o}
		}
		reps, err := s.b.Release(ctx, args)
		if err == nil {
			s.releaseRenamed(ctx, func(i int) *Lease { return ls[lo+i] }, args, reps)
		}
		if err != nil {
			rest := ls[lo:] // renewed no more: they expire
			s.dropEach(len(rest), func(i int) *Lease { return rest[i] }, ErrReleased)
			return nil, fmt.Errorf("release %d leases: %w", len(ls), err)
		}
		batch := ls[lo:hi]
		s.dropEach(len(batch), func(i int) *Lease { return batch[i] }, ErrReleased)
		for i, r := range reps {
			errs[lo+i] = r.Err
		}
	}
	return errs, nil
}
