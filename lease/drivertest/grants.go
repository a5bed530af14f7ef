package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// tickBatch is the tick requests of task t's entities e0..e(n-1) at T,
// for leases of ttl.
func tickBatch(n int, T time.Time, ttl time.Duration) []driver.Request {
	reqs := make([]driver.Request, n)
	for i := range reqs {
		reqs[i] = driver.Request{Task: "t", Entity: fmt.Sprint("e", i), TTL: ttl, Reason: driver.ReasonTick, Tick: T}
	}
	return reqs
}

// grantAll acquires reqs in one batch on s, each granted, and returns the
// leases and their fences by entity.
func grantAll(t *testing.T, s *lease.Store, reqs []driver.Request) ([]*lease.Lease, map[string]int64) {
	t.Helper()
	ls, fences := make([]*lease.Lease, len(reqs)), map[string]int64{}
	for i, r := range s.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			t.Fatalf("%s: %v", reqs[i].Entity, r.Err)
		}
		ls[i], fences[reqs[i].Entity] = r.Lease, r.Lease.Fence
	}
	return ls, fences
}

// higherFences says which of fences (by entity) is not above before's.
func higherFences(before, fences map[string]int64) []string {
	var not []string
	for e, f := range fences {
		if f <= before[e] {
			not = append(not, fmt.Sprintf("%s: %d after %d", e, f, before[e]))
		}
	}
	return not
}

// testBatchAroundAHeldEntity: a tick's batch whose entities are all free
// but one, held by another run, grants the others and says the one busy,
// naming its holder's fence; at the next tick, with every lease released,
// the whole batch is granted, each entity's fence above its last.
func testBatchAroundAHeldEntity(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	const n = 300 // more than a chunk of 256
	held := mustAcquire(t, a, req("e150", time.Minute))
	T := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	reqs := tickBatch(n, T, time.Minute)
	var ls []*lease.Lease
	before := map[string]int64{"e150": held.Fence}
	for i, r := range b.AcquireBatch(bg, reqs) {
		var be *lease.BusyError
		switch {
		case i == 150 && !errors.As(r.Err, &be):
			t.Fatalf("the held entity: %v, want busy", r.Err)
		case i == 150:
			expect.Equal(t, "the busy entity's holder's fence", be.Fence, held.Fence)
		case r.Err != nil:
			t.Fatalf("%s, free: %v", reqs[i].Entity, r.Err)
		default:
			ls = append(ls, r.Lease)
			before[reqs[i].Entity] = r.Lease.Fence
		}
	}
	mustRelease(t, held)
	for _, l := range ls {
		mustRelease(t, l)
	}
	next, fences := grantAll(t, b, tickBatch(n, T.Add(time.Second), time.Minute))
	expect.Equal(t, "entities whose fence did not rise", fmt.Sprint(higherFences(before, fences)), "[]")
	for _, l := range next {
		mustRelease(t, l)
	}
}

// testUnlockInsideABatch: an unlock of one entity of a batch's grant
// revokes that lease alone: its holder is told, it stays busy until the
// holder releases it, and the batch's other leases stay held through two
// renewal rounds and are released as usual; the next tick grants the
// whole batch again, each fence above its last.
func testUnlockInsideABatch(t *testing.T, k stores) {
	var rounds atomic.Int32
	a := k(lease.Options{Replica: "A", OnRenew: func() { rounds.Add(1) }})
	op := k(lease.Options{Replica: "op"})
	const n = 50
	T := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	ls, before := grantAll(t, a, tickBatch(n, T, 1500*time.Millisecond))
	u, err := op.Unlock(bg, "t", "e7", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "the unlocked lease's fence", u.Fence, ls[7].Fence)
	// Held until its holder releases it, or until it expires (1.5s after
	// its last renewal: a loaded machine may get there by the rounds' end).
	if _, err := op.Acquire(bg, req("e7", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("e7 right after the unlock: %v, want busy", err)
	}
	if err := waitCause(t, ls[7], 5*time.Second); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("the unlocked run's cause %v, want lease.ErrRevoked", err)
	}
	after := rounds.Load()
	expect.WaitFor(t, 10*time.Second, "two renewal rounds after the unlock, or another lease stopped", func() bool {
		return rounds.Load() >= after+2 || slices.ContainsFunc(ls, func(l *lease.Lease) bool { return l != ls[7] && l.Context().Err() != nil })
	})
	for i, l := range ls {
		if i != 7 && l.Context().Err() != nil {
			t.Fatalf("%s, not unlocked, stopped: %v", l.Entity, context.Cause(l.Context()))
		}
	}
	if _, err := op.Acquire(bg, req("e8", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("e8 before its holder's release: %v, want busy", err)
	}
	for i, l := range ls {
		out := driver.OutcomeDone
		if i == 7 {
			out = driver.OutcomeUnlocked
		}
		_, err := l.Release(bg, driver.Finished{Outcome: out, Started: l.Acquired, Ended: time.Now()}, nil)
		// The unlocked lease, renewed no more, may have expired by now on a
		// loaded machine: then its holder no longer holds it.
		if err != nil && (i != 7 || !errors.Is(err, driver.ErrNotHeld)) {
			t.Fatalf("release of %s: %v", l.Entity, err)
		}
	}
	next, fences := grantAll(t, op, tickBatch(n, T.Add(time.Second), time.Minute))
	expect.Equal(t, "entities whose fence did not rise", fmt.Sprint(higherFences(before, fences)), "[]")
	for _, l := range next {
		mustRelease(t, l)
	}
}
