package drivertest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// replaceTicks are three ticks before now, a minute apart, and a tick
// request of entity e for the n-th, replacing its holder.
func replaceTicks() func(n int, replace bool) driver.Request {
	T := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
	return func(n int, replace bool) driver.Request {
		return driver.Request{Task: "t", Entity: "e", TTL: 1500 * time.Millisecond, Reason: driver.ReasonTick,
			Tick: T.Add(time.Duration(n) * time.Minute), Replace: replace}
	}
}

// replaceBusy asks for tick n of e with Replace, which finds it busy, and
// says whether that acquire revoked the holder.
func replaceBusy(t *testing.T, s *lease.Store, r driver.Request) bool {
	t.Helper()
	_, err := s.Acquire(bg, r)
	var be *lease.BusyError
	if !errors.As(err, &be) {
		t.Fatalf("replacing acquire of a held entity: %v, want busy", err)
	}
	return be.Replaced
}

// takeReplaced waits up to d for e's one due entry to come due, and
// checks it is the replacing run of tick want.
func takeReplaced(t *testing.T, s *lease.Store, want time.Time, d time.Duration) driver.Due {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ds, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			if len(ds) != 1 || ds[0].Reason != driver.ReasonReplaced || !ds[0].Tick.Equal(want) {
				t.Fatalf("due entries: %+v, want one replaced run of tick %v", ds, want)
			}
			return ds[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replacing run due within %v", d)
		}
		time.Sleep(20 * time.Millisecond) // polling the due set, as the scheduler does
	}
}

// replacing acquires the replacing run of due entry d.
func replacing(t *testing.T, s *lease.Store, d driver.Due) *lease.Lease {
	t.Helper()
	return mustAcquire(t, s, driver.Request{Task: "t", Entity: d.Entity, TTL: time.Minute, Reason: driver.ReasonReplaced, From: &d})
}

// testReplace: a tick that finds its entity busy with Replace revokes the
// holder (told at once, or at its next renewal: ErrReplaced), counts as
// run, and leaves one follow-up with ReasonReplaced carrying the latest
// replacing tick; the holder's release makes it due at once, and it is
// granted with a higher fence; nothing runs after it.
func testReplace(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	tick := replaceTicks()
	l := mustAcquire(t, a, tick(0, false))
	expect.True(t, "the first replacing acquire revokes the holder", replaceBusy(t, b, tick(1, true)))
	expect.Equal(t, "a second one finds it revoked", replaceBusy(t, b, tick(2, true)), false)
	if err := waitCause(t, l, 5*time.Second); !errors.Is(err, lease.ErrReplaced) {
		t.Fatalf("the holder's cause %v, want lease.ErrReplaced", err)
	}
	if _, err := b.Acquire(bg, tick(2, false)); !errors.Is(err, lease.ErrAlreadyRan) {
		t.Fatalf("a late request for the replacing tick: %v, want already ran", err)
	}
	if ds := dues(t, a); len(ds) != 1 || ds[0].At.Before(time.Now().Add(100*time.Millisecond)) {
		t.Fatalf("before the holder's release: %+v, want one entry due at its lease's end", ds)
	}
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeReplaced}, nil); err != nil {
		t.Fatalf("the replaced holder's release: %v", err)
	}
	d := takeReplaced(t, b, tick(2, false).Tick, time.Second)
	n := replacing(t, b, d)
	expect.True(t, "a higher fence", n.Fence > l.Fence)
	releaseLast(t, a, n)
}

// testReplaceFrozenHolder: a holder that never releases (frozen, cut off)
// keeps its lease until it expires, no longer renewed; the replacing run
// is due then, granted, and is the follow-up: none runs after it.
func testReplaceFrozenHolder(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	tick := replaceTicks()
	l := mustAcquire(t, a, tick(0, false))
	expect.True(t, "revoked", replaceBusy(t, b, tick(1, true)))
	d := takeReplaced(t, b, tick(1, false).Tick, 5*time.Second)
	n := replacing(t, b, d)
	expect.True(t, "a higher fence", n.Fence > l.Fence)
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeReplaced}, nil); err == nil {
		t.Fatal("the expired holder's release was taken")
	}
	releaseLast(t, a, n)
}

// testReplaceKeepsTriggers: a trigger that asks while a replace waits for
// a frozen holder's lease to expire runs after the replacing run, which
// comes at the expiry, as it would have after the holder: it is answered.
func testReplaceKeepsTriggers(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	tick := replaceTicks()
	mustAcquire(t, a, tick(0, false)) // frozen: never released
	expect.True(t, "revoked", replaceBusy(t, b, tick(1, true)))
	trig := driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTrigger, Requests: []string{"req1"}}
	if _, err := b.Acquire(bg, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger, Queue: true, From: &trig}); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a trigger while the replace waits: %v, want busy", err)
	}
	d := takeReplaced(t, b, tick(1, false).Tick, 5*time.Second)
	n := replacing(t, b, d)
	if r := mustRelease(t, n); !r.FollowUp {
		t.Fatal("no follow-up for the trigger after the replacing run")
	}
	ds, err := b.TakeDue(bg, 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].Reason != driver.ReasonQueued || !slices.Contains(ds[0].Requests, "req1") {
		t.Fatalf("due after the replacing run: %+v %v, want the trigger's follow-up", ds, err)
	}
}
