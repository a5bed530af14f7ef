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
	// A backfill's run is decided so too.
	mustRelease(t, mustAcquire(t, a, at(driver.ReasonBackfill, "g", 3)))
	if _, err := b.Acquire(bg, at(driver.ReasonBackfill, "e", 3)); !errors.Is(err, lease.ErrAlreadyRan) {
		t.Errorf("a backfill of a tick its entity caught up: %v, want already ran", err)
	}
	// A tick that finds its entity busy and leaves it a run after the
	// holder counts as run.
	q := mustAcquire(t, a, at(driver.ReasonTick, "q", 6))
	queued := at(driver.ReasonTick, "q", 7)
	queued.Queue = true
	if _, err := b.Acquire(bg, queued); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("a tick of a busy entity, queued: %v, want busy", err)
	}
	mustRelease(t, q)
	ticks := []time.Time{T.Add(2 * time.Minute), T.Add(3 * time.Minute), T.Add(5 * time.Minute), T.Add(7 * time.Minute), T.Add(9 * time.Minute)}
	rec, err := b.Fleet().RunRecords().Read(bg, "t", ticks, []string{"e", "f", "g", "q"})
	if err != nil {
		t.Fatal(err)
	}
	// Fanned: an acquire of a tick's runs asked for it (2: the late one).
	expect.Same(t, "the run record of ticks 2, 3, 5, 7 and 9", rec, []driver.TickRan{
		{Kept: true, Ran: []bool{true, true, false, false}, Fanned: true}, {Kept: true, Ran: []bool{true, false, true, false}},
		{Kept: true, Ran: []bool{true, false, false, false}, Fanned: true}, {Kept: true, Ran: []bool{false, false, false, true}, Fanned: true}, {}})
}

// testRecordOfItsOwn: a run ByRecord with RecordOf (a backfill of every
// run again) is decided by that record alone, once per name, and sets the
// tick's own record too: granted for an (entity, tick) that ran, not
// twice under one name, again under another; one that never ran counts
// as run for a backfill of the missing runs after it.
func testRecordOfItsOwn(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	at := func(reason driver.Reason, entity, of string) driver.Request {
		return driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: reason, Tick: T, Record: time.Hour, RecordOf: of}
	}
	mustRelease(t, mustAcquire(t, a, at(driver.ReasonTick, "e", ""))) // ran, recorded
	for _, r := range []struct {
		what    string
		req     driver.Request
		granted bool
	}{
		{"a backfill of every run again, of a run that ran", at(driver.ReasonBackfill, "e", "b1"), true},
		{"the same again, on another store", at(driver.ReasonBackfill, "e", "b1"), false},
		{"another backfill of every run again", at(driver.ReasonBackfill, "e", "b2"), true},
		{"a backfill of the missing runs", at(driver.ReasonBackfill, "e", ""), false},
		{"a backfill of every run again, of a run that never ran", at(driver.ReasonBackfill, "f", "b1"), true},
		{"a backfill of the missing runs after it", at(driver.ReasonBackfill, "f", ""), false},
	} {
		l, err := b.Acquire(bg, r.req)
		switch {
		case r.granted && err != nil:
			t.Errorf("%s: %v, want granted", r.what, err)
		case r.granted:
			mustRelease(t, l)
		case !errors.Is(err, lease.ErrAlreadyRan):
			t.Errorf("%s: %v, want already ran", r.what, err)
		}
	}
}

// testMarkFailed: MarkFailed keeps which entities' runs of a tick failed,
// in its run record (TickRan.Failed), for an entity the record numbers;
// one that never ran under a record is left; a later success clears it.
func testMarkFailed(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	mustRelease(t, mustAcquire(t, a, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T, Record: time.Hour}))
	failed := func() []bool {
		t.Helper()
		rec, err := a.Fleet().RunRecords().Read(bg, "t", []time.Time{T}, []string{"e", "f"})
		if err != nil {
			t.Fatal(err)
		}
		return rec[0].Failed
	}
	for _, e := range []string{"e", "f"} {
		if err := a.Fleet().RunRecords().MarkFailed(bg, "t", T, e, true, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	expect.Same(t, "the failed runs, e's marked (f never ran)", failed(), []bool{true, false})
	if err := a.Fleet().RunRecords().MarkFailed(bg, "t", T, "e", false, time.Hour); err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "the failed runs, e's a success since", failed(), nil)
}
