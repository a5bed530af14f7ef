package drivertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// What the store keeps about an entity is forgotten StateTTL after it was
// last granted or released, by the store itself; a held lease never is.
func testRetention(t *testing.T, k stores) {
	const stateTTL = 300 * time.Millisecond
	s := k(lease.Options{StateTTL: stateTTL})
	mustRelease(t, mustAcquire(t, s, req("old", time.Minute)))
	held := mustAcquire(t, s, req("held", 3*time.Second))
	if st, err := s.Fleet().Entity(bg, "t", "old"); err != nil || st.Last == nil {
		t.Fatalf("fresh record missing: %+v %v", st, err)
	}
	expect.WaitFor(t, 10*time.Second, "the old record to be swept", func() bool {
		st, err := s.Fleet().Entity(bg, "t", "old")
		return err == nil && st.Last == nil
	})
	if held.Context().Err() != nil {
		t.Fatalf("held lease lost: %v", context.Cause(held.Context()))
	}
	if _, err := s.Acquire(bg, req("held", time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("held lease swept: acquire gave %v", err)
	}
	mustRelease(t, held)
}
func testOncePerTick(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	T := time.Date(2026, 1, 22, 10, 15, 0, 0, time.UTC)
	tick := func(s *lease.Store, e string, at time.Time) (*lease.Lease, error) {
		return s.Acquire(bg, driver.Request{Task: "t", Entity: e, TTL: time.Minute, Reason: driver.ReasonTick, Tick: at})
	}
	l, err := tick(a, "e", T)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Tick.Equal(T) {
		t.Fatalf("lease tick %v", l.Tick)
	}
	mustRelease(t, l)
	for _, c := range []struct {
		name string
		at   time.Time
	}{{"same tick, other replica", T}, {"late older tick", T.Add(-15 * time.Minute)}} {
		_, err := tick(b, "e", c.at)
		var ar *lease.AlreadyRanError
		if !errors.As(err, &ar) || !ar.LastTick.Equal(T) {
			t.Fatalf("%s: got %v, want already ran at %v", c.name, err, T)
		}
	}
	// Other reasons skip the tick check.
	mustRelease(t, mustAcquire(t, b, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonReschedule}))
	// Other entities have their own record.
	l, err = tick(b, "f", T)
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, l)
	// A busy entity does not consume the tick.
	hold := mustAcquire(t, a, req("e", time.Minute))
	if _, err := tick(b, "e", T.Add(15*time.Minute)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("tick on busy entity: %v", err)
	}
	mustRelease(t, hold)
	l, err = tick(b, "e", T.Add(15*time.Minute))
	if err != nil {
		t.Fatalf("next tick after busy: %v", err)
	}
	mustRelease(t, l)
}
func testBatch(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	const n = 700 // more than one round trip's worth
	T := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	reqs := make([]driver.Request, n)
	for i := range reqs {
		reqs[i] = driver.Request{Task: "t", Entity: fmt.Sprint("e", i), TTL: time.Minute, Reason: driver.ReasonTick, Tick: T}
	}
	reqs[5].TTL = 0 // one bad request does not spoil the batch
	res := a.AcquireBatch(bg, reqs)
	for i, r := range res {
		if (i == 5) != (r.Err != nil) {
			t.Fatalf("entity %d: %v", i, r.Err)
		}
	}
	// The same tick on another replica: already ran; another reason: busy.
	for i, r := range b.AcquireBatch(bg, reqs) {
		if i != 5 && !errors.Is(r.Err, lease.ErrAlreadyRan) {
			t.Fatalf("same tick on B, entity %d: %v", i, r.Err)
		}
	}
	triggers := make([]driver.Request, n)
	for i, r := range reqs {
		r.Reason = driver.ReasonTrigger
		triggers[i] = r
	}
	for i, r := range b.AcquireBatch(bg, triggers) {
		if i != 5 && !errors.Is(r.Err, lease.ErrBusy) {
			t.Fatalf("trigger on B, entity %d: %v", i, r.Err)
		}
	}
	for i, r := range res {
		if i != 5 {
			mustRelease(t, r.Lease)
		}
	}
	for i, r := range b.AcquireBatch(bg, reqs) {
		if i != 5 && !errors.Is(r.Err, lease.ErrAlreadyRan) {
			t.Fatalf("after release entity %d: %v", i, r.Err)
		}
	}
	next := make([]driver.Request, n)
	for i, r := range reqs {
		r.Tick = T.Add(time.Second)
		next[i] = r
	}
	for i, r := range b.AcquireBatch(bg, next) {
		if i != 5 {
			if r.Err != nil {
				t.Fatalf("next tick entity %d: %v", i, r.Err)
			}
			mustRelease(t, r.Lease)
		}
	}
}
func testEarly(t *testing.T, k stores) {
	s := k(lease.Options{})
	tick := func(at time.Time) error {
		l, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: at})
		if err == nil {
			mustRelease(t, l)
		}
		return err
	}
	// A replica whose clock runs 5s ahead asks for a tick 5s early.
	err := tick(time.Now().Add(5 * time.Second))
	var ee *lease.EarlyError
	if !errors.As(err, &ee) || !errors.Is(err, lease.ErrEarly) {
		t.Fatalf("early tick: %v, want an *lease.EarlyError", err)
	}
	expect.True(t, "the wait is about the 5s the clock is ahead", ee.Wait > 4*time.Second && ee.Wait < 6*time.Second)
	// Nothing was recorded: the tick now is not refused as already ran.
	if err := tick(time.Now()); err != nil {
		t.Fatalf("tick due now: %v", err)
	}
	// Within the tolerance is fine.
	if err := tick(time.Now().Add(driver.EarlyTolerance / 2)); err != nil {
		t.Fatalf("tick within tolerance: %v", err)
	}
	// Other reasons carry no tick to check.
	mustRelease(t, mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonRetry, Tick: time.Now().Add(time.Hour)}))
}

// hostile is an id or text with every separator the stored values use.
const hostile = "a|b#c d%\x00{}:*\n\"'\\é"

var hostileIDs = []string{
	"", " ", "a b", "a:b", "{x}", "}{", "a}:{b", "*", "?", "[a-z]", "\\", "%41", "A",
	"line\nbreak", "nul\x00byte", "ünïcødé 🎉", "$(touch /tmp/x)", "a b;$(touch /tmp/x)",
	string(make([]byte, 10*1024)), fmt.Sprintf("%010240d", 7),
}

func testHostileIDs(t *testing.T, k stores) {
	s := k(lease.Options{})
	var ls []*lease.Lease
	for _, id := range hostileIDs {
		ls = append(ls, mustAcquire(t, s, driver.Request{Task: "we:ird {task}", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger}))
	}
	got := map[string]bool{}
	if err := s.Fleet().Leases(bg, "we:ird {task}", func(h driver.Held) error { got[h.Entity] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, id := range hostileIDs {
		if !got[id] {
			t.Errorf("lease of %q not listed", id)
		}
		if _, err := s.Acquire(bg, driver.Request{Task: "we:ird {task}", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger}); !errors.Is(err, lease.ErrBusy) {
			t.Errorf("%q: %v", id, err)
		}
	}
	if len(got) != len(hostileIDs) {
		t.Errorf("%d leases listed, want %d", len(got), len(hostileIDs))
	}
	for _, l := range ls {
		mustRelease(t, l)
	}
}

// testFloor: a tick run's Floor counts an earlier tick as run (an entity
// whose zone changed ran its period's run in its old zone): refused when
// the entity's last tick is at or after the floor, granted when before, in
// one batch; a Floor after the Tick is the Tick.
func testFloor(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	T := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC) // 09:00 in Berlin
	at := func(e string, tick, floor time.Time) driver.Request {
		return driver.Request{Task: "t", Entity: e, TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick, Floor: floor}
	}
	for _, e := range []string{"moved-west", "moved-east", "late-floor"} {
		mustRelease(t, mustAcquire(t, s, at(e, T, time.Time{})))
	}
	ny := T.Add(6 * time.Hour) // 09:00 in New York, the same day
	res := s.AcquireBatch(bg, []driver.Request{
		at("moved-west", ny, ny.Add(-9*time.Hour)), // the local day's start in New York: 05:00Z
		at("moved-east", ny, T.Add(time.Minute)),   // a floor after its last tick
		at("late-floor", ny, ny.Add(time.Hour)),    // after the tick: the tick's
	})
	var ar *lease.AlreadyRanError
	if !errors.As(res[0].Err, &ar) || !ar.LastTick.Equal(T) {
		t.Errorf("last tick at or after the floor: got %v, want already ran at %v", res[0].Err, T)
	}
	for i, name := range []string{"", "last tick before the floor", "a floor after the tick"} {
		if i == 0 {
			continue
		}
		if res[i].Err != nil {
			t.Errorf("%s: %v, want granted", name, res[i].Err)
			continue
		}
		expect.Equal(t, name+": the lease's tick", res[i].Lease.Tick, ny)
		mustRelease(t, res[i].Lease)
	}
}
