package drivertest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

func dues(t *testing.T, s *lease.Store) []driver.Due {
	t.Helper()
	var ds []driver.Due
	if err := s.Fleet().DueEntries(bg, "", func(d driver.Due) error { ds = append(ds, d); return nil }); err != nil {
		t.Fatal(err)
	}
	return ds
}
func testFollowUp(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	l := mustAcquire(t, a, req("e", time.Minute))
	for range 3 { // several requests, one follow-up
		r := req("e", time.Minute)
		r.Queue = true
		_, err := b.Acquire(bg, r)
		var be *lease.BusyError
		if !errors.As(err, &be) || !be.Queued {
			t.Fatalf("queued acquire: %v", err)
		}
	}
	if ds := dues(t, a); len(ds) != 0 {
		t.Fatalf("follow-up due while the holder runs: %+v", ds)
	}
	if r := mustRelease(t, l); !r.FollowUp {
		t.Fatal("release did not report the follow-up")
	}
	ds, err := b.TakeDue(bg, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Reason != driver.ReasonQueued || ds[0].Entity != "e" {
		t.Fatalf("due after release: %+v", ds)
	}
	f := mustAcquire(t, b, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonQueued, From: &ds[0]})
	releaseLast(t, a, f)
}

// releaseLast releases l, the last run of a chain of follow-ups: it asks
// for no follow-up, and no due entry is left in s.
func releaseLast(t *testing.T, s *lease.Store, l *lease.Lease) {
	t.Helper()
	if r := mustRelease(t, l); r.FollowUp {
		t.Fatalf("a follow-up after the last run of %s", l.Entity)
	}
	if ds := dues(t, s); len(ds) != 0 {
		t.Fatalf("due entries left: %+v", ds)
	}
}

// testFollowUpTick: a queued run carries the tick that queued it, the
// latest when several folded into one (not its holder's, which would have
// every queued run of a long job redo one old tick); that tick counts as
// run, so a late replica's request for it is not queued again; and a
// reschedule the follow-up folds into carries it too.
func testFollowUpTick(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func(n int) driver.Request {
		return driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T.Add(time.Duration(n) * time.Minute), Queue: true}
	}
	l := mustAcquire(t, a, tick(0))
	for _, n := range []int{1, 2} {
		if _, err := b.Acquire(bg, tick(n)); !errors.Is(err, lease.ErrBusy) {
			t.Fatalf("tick %d while the holder runs: %v, want busy", n, err)
		}
	}
	if _, err := b.Acquire(bg, tick(1)); !errors.Is(err, lease.ErrAlreadyRan) {
		t.Fatalf("a late request for a tick already queued: %v, want already ran", err)
	}
	mustRelease(t, l)
	ds := dues(t, a)
	if len(ds) != 1 || ds[0].Reason != driver.ReasonQueued || !ds[0].Tick.Equal(T.Add(2*time.Minute)) {
		t.Fatalf("follow-up %+v, want one queued run for the tick %v", ds, T.Add(2*time.Minute))
	}
	taken, err := b.TakeDue(bg, 10, time.Minute)
	if err != nil || len(taken) != 1 {
		t.Fatalf("take: %v %+v", err, taken)
	}
	f := mustAcquire(t, b, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonQueued, From: &taken[0]})
	if !f.Tick.Equal(T.Add(2 * time.Minute)) {
		t.Fatalf("queued run's tick %v, want %v", f.Tick, T.Add(2*time.Minute))
	}
	// A reschedule of the queued run, with tick 3 queued meanwhile: the
	// next run stands for tick 3 too, and carries it.
	if _, err := a.Acquire(bg, tick(3)); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("tick 3: %v, want busy", err)
	}
	if _, err := f.Release(bg, driver.Finished{Outcome: driver.OutcomeReschedule}, &driver.Next{Reason: driver.ReasonReschedule, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 1 || ds[0].Reason != driver.ReasonReschedule || !ds[0].Tick.Equal(T.Add(3*time.Minute)) {
		t.Fatalf("next run %+v, want one reschedule for the tick %v", ds, T.Add(3*time.Minute))
	}
}
func testReleaseNext(t *testing.T, k stores) {
	s := k(lease.Options{})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
	if _, err := l.Release(bg, driver.Finished{Outcome: "reschedule"}, &driver.Next{Reason: driver.ReasonReschedule, Delay: time.Hour, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	ds := dues(t, s)
	if len(ds) != 1 {
		t.Fatalf("%d due entries, want 1: %+v", len(ds), ds)
	}
	expect.Equal(t, "due reason", ds[0].Reason, driver.ReasonReschedule)
	expect.Equal(t, "due attempt", ds[0].Attempt, 1)
	expect.True(t, "the due entry keeps the run's tick", ds[0].Tick.Equal(T))
	if d := time.Until(ds[0].At); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("due in %v, want 1h", d)
	}
	if got, _ := s.TakeDue(bg, 10, time.Minute); len(got) != 0 {
		t.Fatalf("taken before due: %+v", got)
	}
	// An earlier request replaces nothing: the earliest pending one is kept.
	if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	got, _ := s.TakeDue(bg, 10, time.Minute)
	if len(got) != 1 || got[0].Reason != driver.ReasonTrigger {
		t.Fatalf("taken %+v", got)
	}
	if err := s.Ack(bg, got[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, s); len(ds) != 0 {
		t.Fatalf("left %+v", ds)
	}
}

// A run that carries out a due entry runs for the entry's tick: what it
// enqueues at release (Next, or a follow-up) carries that tick on.
func testChainTick(t *testing.T, k stores) {
	s := k(lease.Options{})
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	take := func() driver.Due {
		t.Helper()
		got, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil || len(got) != 1 || !got[0].Tick.Equal(T) {
			t.Fatalf("taken %+v, %v: want one entry for tick %v", got, err, T)
		}
		return got[0]
	}
	if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonRetry, Attempt: 1, Tick: T}, 0); err != nil {
		t.Fatal(err)
	}
	d := take()
	l := mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: d.Reason, From: &d})
	if _, err := l.Release(bg, driver.Finished{Outcome: "failed"}, &driver.Next{Reason: driver.ReasonRetry, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	d = take()
	l = mustAcquire(t, s, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: d.Reason, From: &d})
	if _, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger, Queue: true}); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("acquire while held: %v", err)
	}
	if r := mustRelease(t, l); !r.FollowUp {
		t.Fatal("no follow-up")
	}
	if d = take(); d.Reason != driver.ReasonQueued {
		t.Fatalf("follow-up %+v", d)
	}
}
func testDueTakenOnce(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	const n = 300
	for i := range n {
		if err := a.Enqueue(bg, driver.Due{Task: "t", Entity: strconv.Itoa(i), Reason: driver.ReasonTrigger}, 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, s := range []*lease.Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ds, err := s.TakeDue(bg, 7, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, d := range ds {
					mu.Lock()
					seen[d.Entity]++
					mu.Unlock()
					if err := s.Ack(bg, d); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d entries taken", len(seen), n)
	}
	for e, c := range seen {
		if c != 1 {
			t.Fatalf("entry %s taken %d times", e, c)
		}
	}
}
func testVisibility(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	if err := a.Enqueue(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonRetry, Attempt: 2}, 0); err != nil {
		t.Fatal(err)
	}
	first, _ := a.TakeDue(bg, 10, 300*time.Millisecond)
	if len(first) != 1 {
		t.Fatalf("taken %+v", first)
	}
	if again, _ := b.TakeDue(bg, 10, time.Minute); len(again) != 0 {
		t.Fatalf("taken twice within visibility: %+v", again)
	}
	// A dies: the entry comes back to B after the visibility timeout.
	var second []driver.Due
	expect.WaitFor(t, 5*time.Second, "entry back after visibility", func() bool {
		second, _ = b.TakeDue(bg, 10, time.Minute)
		return len(second) == 1
	})
	if second[0].Attempt != 2 || second[0].Reason != driver.ReasonRetry {
		t.Fatalf("entry changed: %+v", second[0])
	}
	// A's late ack must not remove B's claim.
	if err := a.Ack(bg, first[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 1 {
		t.Fatalf("stale ack removed the entry: %+v", ds)
	}
	if err := b.Ack(bg, second[0]); err != nil {
		t.Fatal(err)
	}
	if ds := dues(t, a); len(ds) != 0 {
		t.Fatalf("ack left %+v", ds)
	}
}
func testBusyDue(t *testing.T, k stores) {
	s := k(lease.Options{})
	hold := mustAcquire(t, s, req("e", time.Minute))
	if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonReschedule}, 0); err != nil {
		t.Fatal(err)
	}
	ds, _ := s.TakeDue(bg, 10, time.Minute)
	if len(ds) != 1 {
		t.Fatalf("taken %+v", ds)
	}
	_, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonReschedule, Queue: true, From: &ds[0]})
	if !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("acquire: %v", err)
	}
	if left := dues(t, s); len(left) != 0 {
		t.Fatalf("busy due entry not turned into a follow-up: %+v", left)
	}
	if r := mustRelease(t, hold); !r.FollowUp {
		t.Fatal("no follow-up after the holder")
	}
	if left := dues(t, s); len(left) != 1 || left[0].Reason != driver.ReasonQueued {
		t.Fatalf("after release: %+v", left)
	}
}

// Each trigger's request id is answered by exactly the run it causes,
// whatever that run's reason, or by why none ran; never by another run.
func testRequests(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	other := k(lease.Options{Replica: "B"})
	const r1, r2 = "req-1", "req-2"
	trigger := func(t *testing.T, entity string, ids ...string) {
		t.Helper()
		if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: entity, Reason: driver.ReasonTrigger, Requests: ids}, 0); err != nil {
			t.Fatal(err)
		}
	}
	take := func(t *testing.T, entity string) driver.Due {
		t.Helper()
		ds, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil || len(ds) != 1 || ds[0].Entity != entity {
			t.Fatalf("taken %+v, %v: want one entry for %s", ds, err, entity)
		}
		return ds[0]
	}
	run := func(t *testing.T, d driver.Due, queue bool) *lease.Lease {
		t.Helper()
		l, err := s.Acquire(bg, driver.Request{Task: "t", Entity: d.Entity, TTL: time.Minute, Reason: d.Reason, Queue: queue, From: &d})
		if err != nil {
			t.Fatalf("acquire %s: %v", d.Entity, err)
		}
		return l
	}
	busy := func(t *testing.T, d driver.Due, queue bool) {
		t.Helper()
		if _, err := s.Acquire(bg, driver.Request{Task: "t", Entity: d.Entity, TTL: time.Minute, Reason: d.Reason, Queue: queue, From: &d}); !errors.Is(err, lease.ErrBusy) {
			t.Fatalf("acquire %s: %v, want busy", d.Entity, err)
		}
	}
	end := func(t *testing.T, l *lease.Lease, o driver.Outcome, next *driver.Next) {
		t.Helper()
		if _, err := l.Release(bg, driver.Finished{Outcome: o}, next); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(t *testing.T, id string) map[string]driver.Outcome {
		t.Helper()
		m, err := other.Answers(bg, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("a plain trigger, its run done", func(t *testing.T) {
		trigger(t, "a", r1)
		l := run(t, take(t, "a"), false)
		expect.Equal(t, "the run carries the request", strings.Join(l.Requests, ","), r1)
		end(t, l, driver.OutcomeDone, nil)
	})
	t.Run("busy with on_busy queue: the follow-up answers, not the holder", func(t *testing.T) {
		hold := mustAcquire(t, other, req("b", time.Minute))
		trigger(t, "b", r1)
		busy(t, take(t, "b"), true)
		end(t, hold, driver.OutcomeDone, nil)
		if _, ok := answered(t, r1)["b"]; ok {
			t.Fatal("the holder's run answered the trigger it was busy for")
		}
		fu := take(t, "b")
		expect.Equal(t, "follow-up reason", fu.Reason, driver.ReasonQueued)
		end(t, run(t, fu, true), driver.OutcomeFailed, nil)
	})
	t.Run("busy with on_busy skip", func(t *testing.T) {
		hold := mustAcquire(t, other, req("c", time.Minute))
		trigger(t, "c", r1)
		busy(t, take(t, "c"), false)
		end(t, hold, driver.OutcomeDone, nil)
	})
	t.Run("joining a pending reschedule: that run answers", func(t *testing.T) {
		if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "d", Reason: driver.ReasonReschedule, Attempt: 1}, 0); err != nil {
			t.Fatal(err)
		}
		trigger(t, "d", r1)
		d := take(t, "d")
		expect.Equal(t, "joined entry's reason", d.Reason, driver.ReasonReschedule)
		end(t, run(t, d, true), driver.OutcomeReschedule, nil)
	})
	t.Run("handed over (never begun): the next run answers", func(t *testing.T) {
		trigger(t, "e", r1)
		end(t, run(t, take(t, "e"), false), driver.OutcomeCanceled, &driver.Next{Reason: driver.ReasonRetry, HandOver: true})
		if _, ok := answered(t, r1)["e"]; ok {
			t.Fatal("a hand-over answered the trigger")
		}
		end(t, run(t, take(t, "e"), false), driver.OutcomeTimeout, nil)
	})
	t.Run("dropped (no replica runs the task), and another request", func(t *testing.T) {
		trigger(t, "f", r1)
		if err := s.Ack(bg, take(t, "f")); err != nil {
			t.Fatal(err)
		}
		trigger(t, "g", r2)
		end(t, run(t, take(t, "g"), false), driver.OutcomeDone, nil)
	})

	want := map[string]driver.Outcome{"a": driver.OutcomeDone, "b": driver.OutcomeFailed, "c": driver.AnswerSkipped, "d": driver.OutcomeReschedule,
		"e": driver.OutcomeTimeout, "f": driver.AnswerDropped}
	expect.Equal(t, "answers to the first request", fmt.Sprint(answered(t, r1)), fmt.Sprint(want))
	expect.Equal(t, "answers to the second request", fmt.Sprint(answered(t, r2)), fmt.Sprint(map[string]driver.Outcome{"g": driver.OutcomeDone}))
	if err := other.Forget(bg, "t", r1); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "answers after Forget", len(answered(t, r1)), 0)
	if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "x", Requests: []string{"a,b"}}, 0); err == nil {
		t.Fatal("a request id with a comma was accepted")
	}
}
