package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
	"github.com/tickd/tickd/tickdtype"
)

// TestTwoProcessesOnARedis: the public door holds the promises it names,
// between two stores on one Redis as between two replicas: the second is
// told who holds the lease, an unlock cancels the holder's Context with
// ErrRevoked, the entity is free once the holder let go, and the next
// grant has a higher fence.
func TestTwoProcessesOnARedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr
	open := func(replica string) *lease.Store {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		d, err := redisdriver.New(c, "pub", tickdtype.AcksAuto)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := d.(driver.Admin); ok { // a new Redis: no quarantine
			if err := a.InitEpoch(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		s, err := lease.NewRedis(c, "pub", lease.Options{Replica: replica})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
		return s
	}
	ctx := context.Background()
	a, b := open("a"), open("b")
	req := lease.Request{Task: "t", Entity: "e:1 {x}", TTL: 5 * time.Second}
	l, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var busy *lease.BusyError
	if _, err := b.Acquire(ctx, req); !errors.As(err, &busy) || busy.Holder != "a" || busy.Fence != l.Fence || !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("second acquire: %v, want busy held by a at fence %d", err, l.Fence)
	}
	if _, err := b.Unlock(ctx, "t", "e:1 {x}", "operator", false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
		if cause := context.Cause(l.Context()); !errors.Is(cause, lease.ErrRevoked) {
			t.Fatalf("holder's cause %v, want ErrRevoked", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's Context was not cancelled within 10s of the unlock")
	}
	l.Release(ctx, tickdtype.Finished{Outcome: tickdtype.OutcomeUnlocked}, nil) //nolint:errcheck // the revoked holder lets go
	l2, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire after the holder let go: %v", err)
	}
	if l2.Fence <= l.Fence {
		t.Fatalf("fence %d after %d: it must grow", l2.Fence, l.Fence)
	}
	if err := l2.Release(ctx, tickdtype.Finished{Outcome: tickdtype.OutcomeDone}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, tickdtype.Finished{Outcome: tickdtype.OutcomeDone}, nil); err == nil {
		t.Fatal("a second release of a lease let go succeeded; it must touch nothing")
	}
}

// TestInThisProcess: NewMemory's leases hold the same promises within one
// process, with the words of the stable packages alone (a request without
// a reason is a trigger's).
func TestInThisProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := lease.NewMemory(lease.Options{Replica: "here"})
	t.Cleanup(func() { s.Stop(ctx) })
	req := lease.Request{Task: "t", Entity: "e", TTL: time.Minute}
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var busy *lease.BusyError
	if _, err := s.Acquire(ctx, req); !errors.As(err, &busy) || busy.Holder != "here" || busy.Fence != l.Fence {
		t.Fatalf("second acquire: %v, want busy held by here at its fence", err)
	}
	if err := l.Release(ctx, tickdtype.Finished{Outcome: tickdtype.OutcomeDone}, nil); err != nil {
		t.Fatal(err)
	}
	l2, err := s.Acquire(ctx, req)
	if err != nil || l2.Fence <= l.Fence {
		t.Fatalf("after the release: %v, fence %d after %d", err, l2.Fence, l.Fence)
	}
	u, err := s.Unlock(ctx, "t", "e", "operator", true)
	if err != nil || u.Reason != tickdtype.ReasonTrigger || !u.Freed {
		t.Fatalf("unlock: %+v, %v; want the trigger's lease, freed", u, err)
	}
}
