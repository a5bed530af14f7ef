package drivertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

func testExclusion(t *testing.T, k stores) {
	const workers, entities, rounds = 8, 5, 60
	var inUse [entities]atomic.Int32
	var grants, overlaps atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		s := k(lease.Options{Replica: "w" + strconv.Itoa(w)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				e := (i + w) % entities
				l, err := s.Acquire(bg, req(strconv.Itoa(e), time.Second))
				if errors.Is(err, lease.ErrBusy) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				grants.Add(1)
				if inUse[e].Add(1) != 1 {
					overlaps.Add(1)
				}
				inUse[e].Add(-1)
				if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping grants", overlaps.Load())
	}
	if grants.Load() < entities {
		t.Fatalf("only %d grants", grants.Load())
	}
}
func testBusy(t *testing.T, k stores) {
	// A replica id may hold the separator of packed values.
	a := k(lease.Options{Replica: "A|1"})
	b := k(lease.Options{Replica: "B"})
	l := mustAcquire(t, a, req("e", time.Minute))
	_, err := b.Acquire(bg, req("e", time.Minute))
	var be *lease.BusyError
	if !errors.As(err, &be) || !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("second acquire: got %v, want busy", err)
	}
	if be.Holder != "A|1" { // the memory kit's one store is A|1
		t.Errorf("holder %q", be.Holder)
	}
	if be.Fence != l.Fence || time.Since(be.Since) > time.Minute {
		t.Errorf("busy error %+v, lease fence %d", be, l.Fence)
	}
	mustRelease(t, l)
	mustRelease(t, mustAcquire(t, b, req("e", time.Minute)))
}

// jumpClock is the system clock plus an offset a test can move, as a process
// frozen with SIGSTOP sees time jump when it wakes.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }
func testCheck(t *testing.T, k stores) {
	clock := &jumpClock{}
	s := k(lease.Options{Clock: clock})
	l := mustAcquire(t, s, req("e", time.Minute))
	if err := l.Check(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}
	// The process wakes up two minutes later: its trust timer has not fired
	// yet (it runs on the real clock), but Check must refuse there and then,
	// and cancel the context with it.
	// A renewal round of the store's keeper may come first, on the jumped
	// clock (an in-process store's lease expires by it): the lease is then
	// lost, and Check refuses with that. Either way, at once.
	clock.offset.Store(int64(2 * time.Minute))
	untrusted := func(err error) bool { return errors.Is(err, lease.ErrUntrusted) || errors.Is(err, lease.ErrLost) }
	if err := l.Check(); !untrusted(err) {
		t.Fatalf("Check past the trust window: %v, want lease.ErrUntrusted (or lease.ErrLost)", err)
	}
	if err := context.Cause(l.Context()); !untrusted(err) {
		t.Fatalf("context after Check: %v, want cancelled with lease.ErrUntrusted (or lease.ErrLost)", err)
	}
	clock.offset.Store(0)
	l2 := mustAcquire(t, s, req("f", time.Minute))
	mustRelease(t, l2)
	if err := l2.Check(); !errors.Is(err, lease.ErrReleased) {
		t.Fatalf("Check after release: %v, want lease.ErrReleased", err)
	}
}
func testRenewal(t *testing.T, k stores) {
	s := k(lease.Options{})
	// The shortest TTL a holder can keep: a renewal round has 700ms before
	// the trust window ends. With 300ms (140ms for a round, a WAIT in it on
	// the replicated pair) this test timed out once in CI, while the fault
	// suite loaded the machine.
	const ttl = driver.MinTTL
	l := mustAcquire(t, s, req("e", ttl))
	first := l.TrustedUntil()
	// Several renewals: the trust window moves past three TTLs from the start.
	expect.WaitFor(t, 15*time.Second, "renewals", func() bool {
		if err := context.Cause(l.Context()); err != nil {
			t.Fatalf("lease lost before three TTLs of renewals: %v", err)
		}
		return l.TrustedUntil().After(l.Acquired.Add(3 * ttl))
	})
	if l.Context().Err() != nil {
		t.Fatalf("renewed lease cancelled: %v", context.Cause(l.Context()))
	}
	if !l.TrustedUntil().After(first) {
		t.Fatal("trust window did not move")
	}
	if _, err := s.Acquire(bg, req("e", ttl)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("renewed lease acquired by another: %v", err)
	}
	mustRelease(t, l)
	if err := context.Cause(l.Context()); !errors.Is(err, lease.ErrReleased) {
		t.Fatalf("cause after release %v", err)
	}
}

// testUnlock: an unlock from another store revokes the lease: the holder
// is told to stop at its next renewal (ErrRevoked), the entity stays busy
// until the holder has released it, and the release frees it and records
// the run.
func testUnlock(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	op := k(lease.Options{Replica: "op"})
	l := mustAcquire(t, s, req("e", 1500*time.Millisecond))
	u, err := op.Unlock(bg, "t", "e", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "unlocked fence", u.Fence, l.Fence)
	expect.Equal(t, "freed at once", u.Freed, false)
	expect.Equal(t, "told at once (only where it is the unlocking store's)", u.Told, op == s)
	expect.True(t, "free at the latest within the TTL", u.TTL > 0 && u.TTL <= 1500*time.Millisecond)
	if _, err := op.Acquire(bg, req("e", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("acquire of a revoked lease: %v, want busy", err)
	}
	again, err := op.Unlock(bg, "t", "e", "bob", false)
	expect.Equal(t, "second unlock's error", err, nil)
	expect.Equal(t, "second unlock: already revoked", again.Already, true)
	expect.Equal(t, "status shows it revoked", again.Revoked, true)
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("cause %v, want lease.ErrRevoked", err)
	}
	// Told to stop, the holder has not released it yet: still busy.
	if _, err := op.Acquire(bg, req("e", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("acquire of a revoked lease not yet released: %v, want busy", err)
	}
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeUnlocked}, nil); err != nil {
		t.Fatalf("the holder's release of its revoked lease: %v", err)
	}
	st, err := op.Fleet().Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.NotNil(t, "the holder's record of its run", st.Last)
	expect.Equal(t, "run record's outcome", st.Last.Outcome, driver.OutcomeUnlocked)
	expect.Equal(t, "run record's replica (the holder)", st.Last.Replica, "A")
	mustRelease(t, mustAcquire(t, op, req("e", time.Minute)))
	if _, err := op.Unlock(bg, "t", "e", "alice", false); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("unlock of a free entity: %v", err)
	}
}

// testUnlockOwnLease: an unlock by the store that holds the lease tells
// its run at once.
func testUnlockOwnLease(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	l := mustAcquire(t, s, req("e", time.Minute))
	u, err := s.Unlock(bg, "t", "e", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "told at once", u.Told, true)
	if err := context.Cause(l.Context()); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("cause right after the unlock: %v, want lease.ErrRevoked", err)
	}
	if _, err := s.Acquire(bg, req("e", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("acquire before the holder's release: %v, want busy", err)
	}
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeUnlocked}, nil); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, mustAcquire(t, s, req("e", time.Minute)))
}

// testUnlockExpires: a revoked lease whose holder never releases it (a
// frozen process) is free once its TTL passes, not before.
func testUnlockExpires(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	op := k(lease.Options{Replica: "op"})
	mustAcquire(t, s, req("e", 2*time.Second))
	if op != s {
		s.Stop(context.Background()) //nolint:errcheck // renewed no more, never released: a frozen holder
	}
	u, err := op.Unlock(bg, "t", "e", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(u.TTL)
	var nl *lease.Lease
	expect.WaitFor(t, 5*time.Second, "the revoked lease free", func() bool {
		var err error
		nl, err = op.Acquire(bg, req("e", time.Minute))
		if err == nil && time.Now().Before(deadline.Add(-50*time.Millisecond)) {
			t.Fatalf("granted %v before the revoked lease expired", time.Until(deadline))
		}
		return err == nil
	})
	mustRelease(t, nl)
}

// testForceUnlock: -force frees the lease at once and records the unlock
// as the entity's last run, with who did it; the stale holder's release
// does not overwrite it.
func testForceUnlock(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	op := k(lease.Options{Replica: "op"})
	l := mustAcquire(t, s, req("e", 1500*time.Millisecond))
	u, err := op.Unlock(bg, "t", "e", "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	if u.Fence != l.Fence || !u.Freed {
		t.Fatalf("unlocked %+v, held fence %d", u, l.Fence)
	}
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("cause %v, want lease.ErrLost", err)
	}
	if _, err := op.Unlock(bg, "t", "e", "alice", true); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second unlock: %v", err)
	}
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, nil); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("stale holder's release: %v", err)
	}
	st, err := op.Fleet().Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.NotNil(t, "record of the unlock", st.Last)
	expect.Equal(t, "unlock record's outcome", st.Last.Outcome, driver.OutcomeUnlocked)
	expect.Equal(t, "unlock record's replica (the holder)", st.Last.Replica, "A")
	expect.Equal(t, "unlock record's by (who unlocked)", st.Last.By, "alice")
	expect.Equal(t, "unlock record's error", st.Last.Error, "")
	expect.Equal(t, "unlock record's fence", st.Last.Fence, l.Fence)
}

// An entity asked for twice in one batch (a source that lists an id twice)
// is granted once: busy the second time; or, both times inside one chunk
// of a tick's stream, the tick already ran.
func testDuplicateInBatch(t *testing.T, k stores) {
	s := k(lease.Options{})
	res := s.AcquireBatch(bg, []driver.Request{req("d", time.Minute), req("x", time.Minute), req("d", time.Minute)})
	expect.Equal(t, "first ask for d", res[0].Err, nil)
	expect.Equal(t, "ask for x", res[1].Err, nil)
	if !errors.Is(res[2].Err, lease.ErrBusy) {
		t.Errorf("second ask for d in the batch: %v, want busy", res[2].Err)
	} else if res[2].Err.(*lease.BusyError).Fence != res[0].Lease.Fence {
		t.Errorf("duplicate busy with %+v, want the first grant's fence %d", res[2].Err, res[0].Lease.Fence)
	}
	tick := time.Now().Truncate(time.Second)
	inChunk := func(id string) driver.Request {
		return driver.Request{Task: "t", Entity: id, TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick, Chunk: "c"}
	}
	chunk := s.AcquireBatch(bg, []driver.Request{inChunk("cd"), inChunk("cx"), inChunk("cd")})
	expect.Equal(t, "first ask for cd in a chunk", chunk[0].Err, nil)
	expect.Equal(t, "ask for cx in the chunk", chunk[1].Err, nil)
	if !errors.Is(chunk[2].Err, lease.ErrAlreadyRan) {
		t.Errorf("second ask for cd in the chunk: %v, want the tick already ran", chunk[2].Err)
	}
	for _, l := range []*lease.Lease{res[1].Lease, chunk[0].Lease, chunk[1].Lease} {
		mustRelease(t, l)
	}
	// A lease released twice in one batch: the second finds it free.
	errs, err := s.ReleaseBatch(bg, []*lease.Lease{res[0].Lease, res[0].Lease}, driver.Finished{Outcome: driver.OutcomeDone})
	expect.Equal(t, "release batch", err, nil)
	expect.Equal(t, "first release of d", errs[0], nil)
	if !errors.Is(errs[1], driver.ErrNotHeld) {
		t.Errorf("second release of d in the batch: %v, want not held", errs[1])
	}
}
func testCloseReportsHeld(t *testing.T, k stores) {
	s := k(lease.Options{})
	mustRelease(t, mustAcquire(t, s, req("released", time.Minute)))
	held := mustAcquire(t, s, req("held", time.Minute))
	err := s.Stop(context.Background())
	if !errors.Is(err, lease.ErrStillHeld) {
		t.Fatalf("Close with a lease not released: %v, want lease.ErrStillHeld", err)
	}
	if want := "1 leases"; !strings.Contains(err.Error(), want) {
		t.Errorf("Close's error %q does not say %q", err, want)
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lease.ErrClosed) {
		t.Errorf("lease held at Close: cause %v, want lease.ErrClosed", cause)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}
