package lease

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// takeOver lets a short lease of entity expire unrenewed and acquires it
// again: old is the taken-over holder's, cur the new holder's.
func takeOver(t *testing.T, s *Store, entity string) (old, cur *Lease) {
	t.Helper()
	old = mustAcquire(t, s, req(entity, 300*time.Millisecond))
	old.stopRenewing()
	expect.WaitFor(t, 5*time.Second, "lease expiry", func() bool {
		l, err := s.Acquire(bg, req(entity, time.Minute))
		cur = l
		return err == nil
	})
	return old, cur
}

func testTakenOver(t *testing.T, k kit) {
	s := k.client(Options{})
	old, cur := takeOver(t, s, "e")
	if _, err := old.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, nil); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release by taken-over holder: %v, want ErrNotHeld", err)
	}
	if _, err := s.Acquire(bg, req("e", time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("new holder's lease was touched: acquire got %v", err)
	}
	if cur.Fence <= old.Fence {
		t.Fatalf("fence %d after %d", cur.Fence, old.Fence)
	}
	mustRelease(t, cur)
	if _, err := cur.Release(bg, driver.Finished{}, nil); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("double release: %v", err)
	}
}

// thenRec records a ReleaseThen's answer, with the lease's cause then.
type thenRec struct {
	l  *Lease
	ch chan thenAnswer
}

type thenAnswer struct {
	rel   Released
	err   error
	cause error // the lease's, when the answer came
}

func newThenRec(l *Lease) *thenRec { return &thenRec{l: l, ch: make(chan thenAnswer, 2)} }

func (r *thenRec) AfterRelease(rel Released, err error) {
	r.ch <- thenAnswer{rel, err, context.Cause(r.l.Context())}
}

func (r *thenRec) answer(t *testing.T) thenAnswer {
	t.Helper()
	select {
	case a := <-r.ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer for the release of %s", r.l.Entity)
		return thenAnswer{}
	}
}

// testReleaseThen: ReleaseThen answers once, what Release would have, after
// the lease was dropped; a lease taken over is left alone.
func testReleaseThen(t *testing.T, k kit) {
	s := k.client(Options{})
	old, cur := takeOver(t, s, "gone")
	done := mustAcquire(t, s, req("done", time.Minute))
	next := mustAcquire(t, s, req("next", time.Minute))
	recs := []*thenRec{newThenRec(old), newThenRec(done), newThenRec(next)}
	fin := driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}
	old.ReleaseThen(fin, nil, recs[0])
	done.ReleaseThen(fin, nil, recs[1])
	next.ReleaseThen(fin, &driver.Next{Reason: driver.ReasonReschedule, Delay: time.Hour, Attempt: 1}, recs[2])
	if a := recs[0].answer(t); !errors.Is(a.err, driver.ErrNotHeld) {
		t.Fatalf("taken-over holder's ReleaseThen answered %v, want ErrNotHeld", a.err)
	}
	if _, err := s.Acquire(bg, req("gone", time.Minute)); !errors.Is(err, ErrBusy) {
		t.Fatalf("the new holder's lease was touched: acquire got %v", err)
	}
	for _, r := range recs[1:] {
		a := r.answer(t)
		if a.err != nil || !errors.Is(a.cause, ErrReleased) {
			t.Fatalf("%s: answered %v with the lease's cause %v, want nil after ErrReleased", r.l.Entity, a.err, a.cause)
		}
		mustRelease(t, mustAcquire(t, s, req(r.l.Entity, time.Minute))) // free again
	}
	if d := dues(t, s); len(d) != 1 || d[0].Entity != "next" || d[0].Reason != driver.ReasonReschedule {
		t.Fatalf("due entries %+v, want next's reschedule", d)
	}
	// Released already: answered at once, and only once.
	done.ReleaseThen(fin, nil, recs[1])
	if a := recs[1].answer(t); !errors.Is(a.err, driver.ErrNotHeld) {
		t.Fatalf("second ReleaseThen answered %v, want ErrNotHeld", a.err)
	}
	for _, r := range recs {
		select {
		case a := <-r.ch:
			t.Fatalf("%s answered twice: %+v", r.l.Entity, a)
		default:
		}
	}
	mustRelease(t, cur)
}

func testExpiry(t *testing.T, k kit) {
	s := k.client(Options{})
	const ttl = 400 * time.Millisecond
	l := mustAcquire(t, s, req("e", ttl))
	l.stopRenewing()
	if got, want := l.TrustedUntil(), l.Acquired.Add(ttl-Margin(ttl)); !got.Equal(want) {
		t.Fatalf("trusted until %v, want %v", got, want)
	}
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("cause %v, want ErrUntrusted", err)
	}
	if now := time.Now(); now.After(l.Acquired.Add(ttl)) {
		t.Fatalf("context cancelled %v after the lease could have expired", now.Sub(l.Acquired.Add(ttl)))
	}
	expect.WaitFor(t, 5*time.Second, "expired lease to be granted again", func() bool {
		l2, err := s.Acquire(bg, req("e", ttl))
		if err == nil {
			mustRelease(t, l2)
		}
		return err == nil
	})
}

// The leases of one batch share a trust timer, yet each lives on its own: one
// not renewed is dropped in time, one released leaves, and one renewed
// outlives the batch's first window.
func testBatchTrust(t *testing.T, k kit) {
	s := k.client(Options{})
	const ttl = 300 * time.Millisecond
	res := s.AcquireBatch(bg, []driver.Request{req("stale", ttl), req("released", ttl), req("renewed", ttl)})
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	stale, released, renewed := res[0].Lease, res[1].Lease, res[2].Lease
	stale.stopRenewing()
	mustRelease(t, released)
	if err := waitCause(t, stale, 5*time.Second); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("cause %v, want ErrUntrusted", err)
	}
	if now := time.Now(); now.After(stale.Acquired.Add(ttl)) {
		t.Fatalf("context cancelled %v after the lease could have expired", now.Sub(stale.Acquired.Add(ttl)))
	}
	expect.WaitFor(t, 10*time.Second, "renewals", func() bool {
		return renewed.TrustedUntil().After(renewed.Acquired.Add(3 * ttl))
	})
	if err := context.Cause(renewed.Context()); err != nil {
		t.Fatalf("renewed lease cancelled: %v", err)
	}
	if n := renewed.Renewals(); n < 1 {
		t.Fatalf("a lease renewed past three TTLs counts %d renewals", n)
	}
	if err := context.Cause(released.Context()); !errors.Is(err, ErrReleased) {
		t.Fatalf("released lease: cause %v", err)
	}
	mustRelease(t, renewed)
}

// closingClock closes its store, once armed, from inside the acquire that
// reads it: the grant arrives after Close has dropped every lease.
type closingClock struct {
	s     *Store
	armed atomic.Bool
}

func (c *closingClock) Now() time.Time {
	// Only the acquire's read trips it: the keeper and the limits' settler
	// read the clock on their own timers, and one of them tripping it
	// first would close the store before the acquire even began.
	if inAcquire() && c.armed.CompareAndSwap(true, false) {
		go c.s.Stop(context.Background())
		for {
			if c.s.keeper.isClosed() {
				break
			}
			runtime.Gosched()
		}
	}
	return time.Now()
}

// inAcquire says whether the caller is inside the store's acquire round.
func inAcquire() bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*Store).acquireRound") {
			return true
		}
		if !more {
			return false
		}
	}
}

func testGrantedWhileClosing(t *testing.T, k kit) {
	clock := &closingClock{}
	s := k.client(Options{Clock: clock})
	clock.s = s
	if err := s.Start(bg); err != nil {
		t.Fatal(err)
	}
	// The keeper reads the clock too: arm it once the keeper sleeps.
	expect.WaitFor(t, 5*time.Second, "keeper asleep", func() bool {
		s.keeper.mu.Lock()
		defer s.keeper.mu.Unlock()
		return !s.keeper.wakeAt.IsZero()
	})
	clock.armed.Store(true)
	l, err := s.Acquire(bg, req("e", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := context.Cause(l.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("lease granted while closing: cause %v, want ErrClosed", err)
	}
}

func testFences(t *testing.T, k kit) {
	s := k.client(Options{StateTTL: 200 * time.Millisecond})
	var last int64
	check := func(l *Lease) {
		t.Helper()
		if l.Fence <= last {
			t.Fatalf("fence %d after %d", l.Fence, last)
		}
		last = l.Fence
	}
	for range 5 {
		l := mustAcquire(t, s, req("e", time.Minute))
		check(l)
		mustRelease(t, l)
	}
	// After the lease expired.
	l := mustAcquire(t, s, req("e", 200*time.Millisecond))
	check(l)
	l.stopRenewing()
	expect.WaitFor(t, 5*time.Second, "expiry", func() bool {
		l2, err := s.Acquire(bg, req("e", time.Minute))
		if err == nil {
			check(l2)
			mustRelease(t, l2)
		}
		return err == nil
	})
	// After the state expired (StateTTL 200ms) and was swept: the entity's
	// last run is forgotten, and a fresh grant still gets a higher fence.
	expect.WaitFor(t, 5*time.Second, "state swept", func() bool {
		if err := s.Fleet().Sweep(bg); err != nil {
			t.Fatal(err)
		}
		st, err := s.Fleet().Entity(bg, "t", "e")
		return err == nil && st.Last == nil
	})
	l = mustAcquire(t, s, req("e", time.Minute))
	check(l)
	mustRelease(t, l)
}
