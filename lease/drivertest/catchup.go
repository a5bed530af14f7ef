package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// testCatchUpRunsOnce: a catch-up run of an older tick is decided by the
// run record, not by the entity's last tick: granted after a newer tick
// ran (which a tick run would not be), once; refused for a tick a tick
// run recorded; and it counts as run for a late tick run of its tick.
func testCatchUpRunsOnce(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	at := func(reason driver.Reason, entity string, n int) driver.Request {
		return driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: reason,
			Tick: T.Add(time.Duration(n) * time.Minute), Record: time.Hour}
	}
	mustRelease(t, mustAcquire(t, a, at(driver.ReasonTick, "e", 5))) // the current tick, recorded
	l := mustAcquire(t, a, at(driver.ReasonCatchUp, "e", 2))         // a missed one, after it
	if _, err := b.Acquire(bg, at(driver.ReasonCatchUp, "f", 2)); err != nil {
		t.Fatalf("a catch-up of an entity never run: %v", err)
	}
	if _, err := b.Acquire(bg, at(driver.ReasonCatchUp, "e", 3)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a catch-up of a busy entity: %v, want busy", err)
	}
	mustRelease(t, l)
	for _, r := range []struct {
		what string
		req  driver.Request
	}{
		{"the same catch-up again, on another store", at(driver.ReasonCatchUp, "e", 2)},
		{"a catch-up of the tick the tick run recorded", at(driver.ReasonCatchUp, "e", 5)},
		{"a late tick run of the caught-up tick", at(driver.ReasonTick, "e", 2)},
	} {
		if _, err := b.Acquire(bg, r.req); !errors.Is(err, lease.ErrAlreadyRan) {
			t.Errorf("%s: %v, want already ran", r.what, err)
		}
	}
	l = mustAcquire(t, b, at(driver.ReasonCatchUp, "e", 3)) // another missed tick: its own
	expect.True(t, "a higher fence", l.Fence > 0)
	mustRelease(t, l)
}
