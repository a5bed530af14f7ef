package drivertest

import (
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// testBackfills: a backfill is kept as saved; one store holds it at a
// time, until its hold passes or it lets it go; a cancel is kept, and
// stops its holder's next save. (An in-process driver has one store: a
// and b are one, and hold it together.)
func testBackfills(t *testing.T, k stores) {
	sa, sb := k(lease.Options{Replica: "A"}), k(lease.Options{Replica: "B"})
	a, b, two := sa.Fleet(), sb.Fleet(), sa != sb
	T := time.Now().Truncate(time.Minute).UTC()
	bf := driver.Backfill{ID: "x1", Task: "we:ird {task}", From: T.Add(-time.Hour), To: T, Entities: []string{"e|1", "f"},
		Only: driver.BackfillAll, By: "ops@host", Created: T}
	if ok, err := a.SaveBackfill(bg, bf, 0); err != nil || !ok {
		t.Fatalf("create: %v, %v", ok, err)
	}
	if ok, err := a.SaveBackfill(bg, bf, time.Minute); err != nil || !ok {
		t.Fatalf("a takes it: %v, %v", ok, err)
	}
	if ok, err := b.SaveBackfill(bg, bf, time.Minute); err != nil || ok != !two {
		t.Fatalf("b takes it from a, whose hold goes on: %v, %v", ok, err)
	}
	bf.Cursor, bf.Ticks, bf.Ran, bf.Skipped, bf.Busy = T.Add(-30*time.Minute), 31, 60, 2, 1
	if ok, err := a.SaveBackfill(bg, bf, 50*time.Millisecond); err != nil || !ok {
		t.Fatalf("a saves its progress: %v, %v", ok, err)
	}
	expect.WaitFor(t, 5*time.Second, "b to take it once a's hold passed", func() bool {
		ok, err := b.SaveBackfill(bg, bf, time.Minute)
		return err == nil && ok
	})
	got := readBackfill(t, a, "x1")
	expect.True(t, "its holder is b's, until a minute on", got.Holder != "" && got.Until.After(time.Now().Add(50*time.Second)))
	got.Holder, got.Until = "", time.Time{}
	expect.Same(t, "the backfill as saved", got, bf)
	if ok, err := b.SaveBackfill(bg, bf, 0); err != nil || !ok {
		t.Fatalf("b lets it go: %v, %v", ok, err)
	}
	if ok, err := a.SaveBackfill(bg, bf, time.Minute); err != nil || !ok {
		t.Fatalf("a takes it once b let it go: %v, %v", ok, err)
	}
	cancelBackfill(t, a, b, bf)
}

// cancelBackfill: b cancels bf, which a holds: a's next save is refused,
// and who cancelled it is kept (the first).
func cancelBackfill(t *testing.T, a, b lease.Fleet, bf driver.Backfill) {
	t.Helper()
	for _, id := range []string{"x1", "x1"} { // twice: the first stands
		if ok, err := b.CancelBackfill(bg, id, "ops2@host"); err != nil || !ok {
			t.Fatalf("cancel: %v, %v", ok, err)
		}
	}
	if ok, err := b.CancelBackfill(bg, "nope", "ops@host"); err != nil || ok {
		t.Fatalf("cancel of no backfill: %v, %v", ok, err)
	}
	if ok, err := a.SaveBackfill(bg, bf, time.Minute); err != nil || ok {
		t.Fatalf("its holder saves a cancelled backfill: %v, %v", ok, err)
	}
	expect.Same(t, "who cancelled it", readBackfill(t, b, "x1").Cancelled, "ops2@host")
}

// readBackfill is backfill id as f reads it.
func readBackfill(t *testing.T, f lease.Fleet, id string) driver.Backfill {
	t.Helper()
	bs, err := f.Backfills(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no backfill %s in %v", id, bs)
	return driver.Backfill{}
}
