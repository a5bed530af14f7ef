package drivertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// limited asks for entity's lease of task under limits, and returns the
// *LimitedError it was refused with (nil if granted: the lease is
// released).
func limited(t *testing.T, s *lease.Store, task, entity string, limits ...string) *lease.LimitedError {
	t.Helper()
	return limitedReq(t, s, driver.Request{Task: task, Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: limits})
}

// limitedReq is limited's, for a request of its own.
func limitedReq(t *testing.T, s *lease.Store, r driver.Request) *lease.LimitedError {
	t.Helper()
	l, err := s.Acquire(bg, r)
	var le *lease.LimitedError
	switch {
	case err == nil:
		mustRelease(t, l)
		return nil
	case errors.As(err, &le):
		return le
	}
	t.Fatalf("acquire %s/%s: %v", r.Task, r.Entity, err)
	return nil
}

// limitStores are two replicas' stores (one for an in-process driver)
// that know lims.
func limitStores(k stores, lims ...driver.Limit) (a, b *lease.Store) {
	a, b = k(lease.Options{Replica: "a"}), k(lease.Options{Replica: "b"})
	a.SetLimits(lims)
	b.SetLimits(lims)
	return a, b
}

// testLimitPerProcess: two processes given one replica id (a copied unit
// file) count their runs apart: with 2 runs on one and 1 on the other, a
// limit of 3 stays full however often each says how many it runs (every
// third of the lease TTL: four times here). Before, each one's count replaced the other's,
// and a limit of 3 ran 5 at once.
func testLimitPerProcess(t *testing.T, k stores) {
	lim := driver.Limit{Name: "api", Concurrency: 3, Burst: 1}
	a, b := k(lease.Options{Replica: "same"}), k(lease.Options{Replica: "same"})
	a.SetLimits([]driver.Limit{lim})
	b.SetLimits([]driver.Limit{lim})
	ttl := driver.MinTTL // each says its runs every third of it
	var held []*lease.Lease
	for i, s := range []*lease.Store{a, a, b} {
		held = append(held, mustAcquire(t, s, driver.Request{Task: "t", Entity: fmt.Sprint("e", i), TTL: ttl, Reason: driver.ReasonTrigger, Limits: []string{"api"}}))
	}
	for end := time.Now().Add(4 * ttl / 3); time.Now().Before(end); time.Sleep(100 * time.Millisecond) { // over several settles
		for i, s := range []*lease.Store{a, b} {
			l, err := s.Acquire(bg, driver.Request{Task: "t", Entity: fmt.Sprint("x", i), TTL: ttl, Reason: driver.ReasonTrigger, Limits: []string{"api"}})
			if err == nil {
				mustRelease(t, l)
				t.Fatalf("a fourth run under a limit of 3, with 3 held by two processes of one replica id")
			}
			if !errors.Is(err, lease.ErrLimited) {
				t.Fatal(err)
			}
		}
	}
	for _, l := range held {
		mustRelease(t, l)
	}
}

// testLimitConcurrency: a limit's concurrency counts the runs of every
// replica, of every task that names it; a run that ends gives its place.
func testLimitConcurrency(t *testing.T, k stores) {
	a, b := limitStores(k, driver.Limit{Name: "api", Concurrency: 2, Burst: 1})
	var held []*lease.Lease
	for _, e := range []string{"e1", "e2"} {
		held = append(held, mustAcquire(t, a, driver.Request{Task: "a", Entity: e, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"api"}}))
	}
	le := limited(t, b, "b", "e3", "api")
	if le == nil || le.Why != driver.LimitFull || le.Limit != "api" || le.Wait <= 0 {
		t.Fatalf("a third run under a limit of 2: %+v, want refused as full, with a wait", le)
	}
	st, err := b.Fleet().LimitStatus(bg, driver.Limit{Name: "api", Concurrency: 2})
	noErr(t, err)
	expect.Equal(t, "runs under the limit", st.Runs, 2)
	mustRelease(t, held[0])
	expect.WaitFor(t, 10*time.Second, "the ended run's place", func() bool { return limited(t, b, "b", "e3", "api") == nil })
	mustRelease(t, held[1])
	expect.WaitFor(t, 10*time.Second, "no runs counted", func() bool {
		st, err := a.Fleet().LimitStatus(bg, driver.Limit{Name: "api"})
		return err == nil && st.Runs == 0
	})
}

// testLimitGivesBack: a start taken for a run whose lease is refused
// (busy) is given back at once.
func testLimitGivesBack(t *testing.T, k stores) {
	a, _ := limitStores(k, driver.Limit{Name: "one", Concurrency: 1, Rate: 1, Per: time.Hour, Burst: 2})
	l := mustAcquire(t, a, req("x", time.Minute)) // held, under no limit
	_, err := a.Acquire(bg, driver.Request{Task: "t", Entity: "x", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"one"}})
	if !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("busy entity under a limit: %v, want busy", err)
	}
	if le := limited(t, a, "t", "y", "one"); le != nil {
		t.Fatalf("the start taken for the busy run was not given back: %v", le)
	}
	mustRelease(t, l)
}

// testLimitRate: starts at the rate, burst at once; those refused wait
// their turn, one interval after another.
func testLimitRate(t *testing.T, k stores) {
	a, b := limitStores(k, driver.Limit{Name: "r", Rate: 2, Per: time.Minute, Burst: 1})
	if le := limited(t, a, "t", "e1", "r"); le != nil {
		t.Fatalf("first start refused: %v", le)
	}
	res := b.AcquireBatch(bg, []driver.Request{
		{Task: "t", Entity: "e2", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"r"}},
		{Task: "t", Entity: "e3", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"r"}},
	})
	var waits []time.Duration
	for _, r := range res {
		var le *lease.LimitedError
		if !errors.As(r.Err, &le) || le.Why != driver.LimitRate {
			t.Fatalf("a start above the rate: %v, want refused for the rate", r.Err)
		}
		waits = append(waits, le.Wait)
	}
	if waits[0] < 25*time.Second || waits[0] > 30*time.Second || waits[1]-waits[0] < 29*time.Second || waits[1]-waits[0] > 31*time.Second {
		t.Fatalf("waits %v: want about 30s, then 30s more", waits)
	}
}

// testLimitClosed: a closed budget grants nothing, on any replica, until
// its time; per entity, only that entity's.
func testLimitClosed(t *testing.T, k stores) {
	all := driver.Limit{Name: "all", Concurrency: 5, Burst: 1}
	each := driver.Limit{Name: "each", Concurrency: 5, Burst: 1, PerEntity: true}
	a, b := limitStores(k, all, each)
	noErr(t, a.Budgets().Close(bg, all, "anyone", time.Minute, "429 from crm | Retry-After: 60"))
	le := limited(t, b, "t", "e1", "all")
	if le == nil || le.Why != driver.LimitClosed || le.Reason != "429 from crm | Retry-After: 60" || le.Wait < 55*time.Second || le.Wait > time.Minute {
		t.Fatalf("under a closed limit: %+v", le)
	}
	noErr(t, a.Budgets().Close(bg, each, "shop 1", 100*time.Millisecond, "429"))
	if le := limited(t, b, "t", "shop 2", "each"); le != nil {
		t.Fatalf("another entity's budget was closed too: %v", le)
	}
	if le := limited(t, b, "t", "shop 1", "each"); le == nil || le.Why != driver.LimitClosed {
		t.Fatalf("the closed entity: %+v", le)
	}
	st, err := b.Fleet().LimitStatus(bg, each)
	noErr(t, err)
	if len(st.Closed) != 1 || !strings.Contains(st.Closed["shop 1"].Reason, "429") {
		t.Fatalf("status of the closed budgets: %+v", st.Closed)
	}
	expect.WaitFor(t, 10*time.Second, "the budget opens again", func() bool { return limited(t, b, "t", "shop 1", "each") == nil })
}

// testLimitPerEntity: a limit per entity counts each entity's runs, over
// the tasks that name it, apart.
func testLimitPerEntity(t *testing.T, k stores) {
	a, b := limitStores(k, driver.Limit{Name: "token", Concurrency: 1, Burst: 1, PerEntity: true})
	l := mustAcquire(t, a, driver.Request{Task: "a", Entity: "shop", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"token"}})
	if le := limited(t, b, "b", "shop", "token"); le == nil || le.Why != driver.LimitFull {
		t.Fatalf("the same entity, another task: %+v, want full", le)
	}
	if le := limited(t, b, "b", "other shop", "token"); le != nil {
		t.Fatalf("another entity: %v", le)
	}
	mustRelease(t, l)
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLimitedTickYields: a tick's run waiting for a limit (a due entry of
// reason tick) never takes the place of another run asked for, and any
// other takes its place: else a retry after a back-off merged into it would
// be lost when the tick's run is refused as already ran.
func testLimitedTickYields(t *testing.T, k stores) {
	s := k(lease.Options{})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	waiting := driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTick, Tick: T}
	retry := driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonRetry, Tick: T}
	noErr(t, s.Enqueue(bg, waiting, 0))
	noErr(t, s.Enqueue(bg, retry, time.Hour))
	if ds := dues(t, s); len(ds) != 1 || ds[0].Reason != driver.ReasonRetry {
		t.Fatalf("after a retry joined a waiting tick run: %+v, want the retry", ds)
	}
	noErr(t, s.Enqueue(bg, waiting, 0))
	if ds := dues(t, s); len(ds) != 1 || ds[0].Reason != driver.ReasonRetry || time.Until(ds[0].At) < 59*time.Minute {
		t.Fatalf("after a waiting tick run joined a retry: %+v, want the retry, due as it was", ds)
	}
}

// testLimitServesInOrder: a full limit's runs wait in line, the oldest
// first, across replicas: a place freed goes to the run that has waited
// longest, even when a younger one asks first, and a run keeps its place
// (its older since) when it asks again. A run that never asks again (its
// replica stopped) leaves the line after its wait and LimitWaitGrace.
// Before, whoever asked first after a run ended got its place, and some
// entities waited for ever.
func testLimitServesInOrder(t *testing.T, k stores) {
	a, b := limitStores(k, driver.Limit{Name: "one", Concurrency: 1, Burst: 1})
	ask := func(s *lease.Store, entity string, since time.Time) *lease.LimitedError {
		t.Helper()
		return limitedReq(t, s, driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"one"}, Since: since})
	}
	hold := func(entity string) *lease.Lease {
		// Older than any in line: ahead of them.
		return mustAcquire(t, a, driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"one"}, Since: time.Now().Add(-48 * time.Hour)})
	}
	free := func() {
		expect.WaitFor(t, 10*time.Second, "the limit's place free", func() bool {
			st, err := a.Fleet().LimitStatus(bg, driver.Limit{Name: "one"})
			return err == nil && st.Runs == 0
		})
	}
	old, young := time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	held := hold("holder")
	if le := ask(a, "young", young); le == nil || le.Why != driver.LimitFull || le.Wait <= 0 {
		t.Fatalf("a run under a full limit: %+v, want refused as full, with a wait", le)
	}
	if le := ask(b, "old", old); le == nil {
		t.Fatal("a run under a full limit granted")
	}
	st, err := a.Fleet().LimitStatus(bg, driver.Limit{Name: "one"})
	noErr(t, err)
	expect.Equal(t, "runs waiting", st.Waiting, 2)
	expect.True(t, fmt.Sprintf("the oldest waiting, first: %+v", st.Oldest), len(st.Oldest) == 2 && st.Oldest[0].Since.Sub(old).Abs() < time.Second)
	if ask(a, "young", time.Now()) == nil { // asks again, later: keeps its place
		t.Fatal("a run under a full limit granted")
	}
	mustRelease(t, held)
	free()
	if le := ask(a, "young", time.Now()); le == nil {
		t.Fatal("the place went to the younger run that asked first; the older one waits")
	}
	if le := ask(b, "old", time.Now()); le != nil {
		t.Fatalf("the oldest waiting run refused the free place: %v", le)
	}
	free()
	held = hold("holder")
	if ask(b, "gone", old) == nil {
		t.Fatal("a run under a full limit granted")
	}
	mustRelease(t, held)
	free()
	began := time.Now()
	expect.WaitFor(t, 15*time.Second, "the run behind one that never asked again", func() bool { return ask(a, "young", time.Now()) == nil })
	if d := time.Since(began); d < driver.LimitWaitGrace {
		t.Fatalf("a waiting run lost its place after %v, want its wait and %v", d, driver.LimitWaitGrace)
	}
}

// testNewerTickSupersedes: an entity has one waiting tick run: a newer
// tick's supersedes the older's (which it names, for the older tick's
// record) and keeps its due time; an older one joining a newer is the one
// superseded. Before, the older tick's run was kept, and the newer lost.
func testNewerTickSupersedes(t *testing.T, k stores) {
	s := k(lease.Options{})
	T1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	T2 := T1.Add(time.Minute)
	sup, err := s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTick, Tick: T1}, 0)
	noErr(t, err)
	expect.True(t, "the first waiting run supersedes nothing", sup.IsZero())
	sup, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTick, Tick: T2}, time.Hour)
	noErr(t, err)
	expect.True(t, fmt.Sprintf("the newer tick's run supersedes the older's: %v", sup), sup.Equal(T1))
	ds := dues(t, s)
	if len(ds) != 1 || !ds[0].Tick.Equal(T2) || time.Until(ds[0].At) > time.Minute {
		t.Fatalf("after a newer tick's run: %+v, want one, of the newer tick, due when the older was", ds)
	}
	sup, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTick, Tick: T1}, 0)
	noErr(t, err)
	expect.True(t, fmt.Sprintf("an older tick's run joining a newer is superseded: %v", sup), sup.Equal(T1))
	if ds := dues(t, s); len(ds) != 1 || !ds[0].Tick.Equal(T2) {
		t.Fatalf("after an older tick's run: %+v, want the newer tick's", ds)
	}
	// The same tick's run enqueued twice (two replicas' fan-outs met the
	// limit) is one waiting run, and the second enqueue says so.
	_, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "s", Reason: driver.ReasonTick, Tick: T1}, 0)
	noErr(t, err)
	_, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "s", Reason: driver.ReasonTick, Tick: T1}, 0)
	expect.True(t, fmt.Sprintf("the same tick's run again: %v, want driver.ErrWaiting", err), errors.Is(err, driver.ErrWaiting))
	// A tick's waiting run that yields to another run of the entity (a
	// retry after a back-off) is superseded by it, and says so: its tick's
	// record counted it as waiting for good before.
	_, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "r", Reason: driver.ReasonRetry, Tick: T1}, 0)
	noErr(t, err)
	sup, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "r", Reason: driver.ReasonTick, Tick: T2}, 0)
	noErr(t, err)
	expect.True(t, fmt.Sprintf("a tick's run yielding to a retry is superseded: %v", sup), sup.Equal(T2))
	// And a retry that takes the place of a tick's waiting run says so.
	_, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "q", Reason: driver.ReasonTick, Tick: T2}, time.Hour)
	noErr(t, err)
	sup, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "q", Reason: driver.ReasonRetry, Tick: T1}, 0)
	noErr(t, err)
	expect.True(t, fmt.Sprintf("a retry taking a tick's waiting run's place supersedes it: %v", sup), sup.Equal(T2))
	// So does the run a release asks for (a retry after a back-off, a
	// reschedule) when the entity's tick run waits meanwhile: its release
	// says which tick it superseded.
	l := mustAcquire(t, s, driver.Request{Task: "t", Entity: "w", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T1})
	_, err = s.EnqueueWaiting(bg, driver.Due{Task: "t", Entity: "w", Reason: driver.ReasonTick, Tick: T2}, time.Hour)
	noErr(t, err)
	rel, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeReschedule}, &driver.Next{Reason: driver.ReasonRetry, Attempt: 1})
	noErr(t, err)
	expect.True(t, fmt.Sprintf("the release's retry supersedes the tick's waiting run: %v", rel.Superseded), rel.Superseded.Equal(T2))
}
