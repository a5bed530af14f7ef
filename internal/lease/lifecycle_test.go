package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// A store starts nothing when it is built; one never started starts itself
// at its first grant, so that its leases are renewed all the same.
func TestAStoreNotStartedStartsAtItsFirstGrant(t *testing.T) {
	var renewals atomic.Int64
	s := NewMemory(Options{OnRenew: func() { renewals.Add(1) }})
	t.Cleanup(func() { s.Stop(context.Background()) }) //nolint:errcheck
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		t.Fatal("New started the store")
	}
	l := mustAcquire(t, s, req("e", 300*time.Millisecond))
	expect.WaitFor(t, 5*time.Second, "a renewal", func() bool { return renewals.Load() > 0 })
	if err := l.Context().Err(); err != nil {
		t.Errorf("the lease's context ended: %v", context.Cause(l.Context()))
	}
	mustRelease(t, l)
}

// Stop ends what Start started, within its ctx, and for good: a Start after
// it is refused, a second Stop does nothing, and a store stopped without
// having started stops at once.
func TestStopIsForGood(t *testing.T) {
	ctx := context.Background()
	s := NewMemory(Options{})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, s, req("e", time.Minute))
	if err := s.Stop(ctx); !errors.Is(err, ErrStillHeld) {
		t.Errorf("Stop with a lease held: %v, want ErrStillHeld", err)
	}
	if !errors.Is(context.Cause(l.Context()), ErrClosed) {
		t.Errorf("the held lease's context: %v, want ErrClosed", context.Cause(l.Context()))
	}
	if err := s.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Stop: %v, want ErrClosed", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	never := NewMemory(Options{})
	cctx, cancel := context.WithCancel(ctx)
	cancel() // a Stop that would wait for a keeper would fail
	if err := never.Stop(cctx); err != nil {
		t.Errorf("Stop of a store never started: %v", err)
	}
}

type closer struct{ closed atomic.Bool }

func (c *closer) Close() error { c.closed.Store(true); return nil }

// Options.Closer is closed by Stop, after the store stopped.
func TestStopClosesTheCloser(t *testing.T) {
	c := &closer{}
	s := NewMemory(Options{Closer: c})
	if err := s.Stop(context.Background()); err != nil || !c.closed.Load() {
		t.Errorf("Stop: %v, closer closed %v; want nil, true", err, c.closed.Load())
	}
}
