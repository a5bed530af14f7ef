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

// queueBusy asks for r, which finds its entity busy, and returns the
// ticks it dropped and missed from the entity's buffer.
func queueBusy(t *testing.T, s *lease.Store, r driver.Request) (dropped, missed []time.Time) {
	t.Helper()
	_, err := s.Acquire(bg, r)
	var be *lease.BusyError
	if !errors.As(err, &be) || !be.Queued {
		t.Fatalf("queued acquire of tick %v: %v, want busy and queued", r.Tick, err)
	}
	return be.Dropped, be.Missed
}

func sameTicks(t *testing.T, what string, got, want []time.Time) {
	t.Helper()
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// drainBuffer releases l and then each follow-up it leaves, in turn, and
// returns the ticks they ran with.
func drainBuffer(t *testing.T, s *lease.Store, l *lease.Lease) []time.Time {
	t.Helper()
	var ran []time.Time
	for range 10 {
		if r := mustRelease(t, l); !r.FollowUp {
			if ds := dues(t, s); len(ds) != 0 {
				t.Fatalf("due entries left after the last follow-up: %+v", ds)
			}
			return ran
		}
		ds, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil || len(ds) != 1 || ds[0].Reason != driver.ReasonQueued {
			t.Fatalf("due after a release: %+v %v, want one queued run", ds, err)
		}
		ran = append(ran, ds[0].Tick)
		l = mustAcquire(t, s, driver.Request{Task: "t", Entity: ds[0].Entity, TTL: time.Minute, Reason: driver.ReasonQueued, From: &ds[0]})
	}
	t.Fatal("more than 10 follow-ups")
	return nil
}

// testQueueBuffersTicks: with QueueMax 3 the ticks that find the entity
// busy are buffered, each run once after the holder with its own tick,
// oldest first; past 3 the oldest is dropped, and said so; with QueueAge
// a tick buffered longer than it before the newest is missed, and said so.
func testQueueBuffersTicks(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	tick := func(entity string, n int, age time.Duration) driver.Request {
		return driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTick,
			Tick: T.Add(time.Duration(n) * time.Minute), Queue: true, QueueMax: 3, QueueAge: age}
	}
	at := func(ns ...int) []time.Time {
		var ts []time.Time
		for _, n := range ns {
			ts = append(ts, T.Add(time.Duration(n)*time.Minute))
		}
		return ts
	}
	l := mustAcquire(t, a, driver.Request{Task: "t", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
	for n := 1; n <= 5; n++ {
		dropped, missed := queueBusy(t, b, tick("e", n, 0))
		var want []time.Time
		if n > 3 {
			want = at(n - 3)
		}
		sameTicks(t, "dropped by tick "+T.Add(time.Duration(n)*time.Minute).Format(time.TimeOnly), dropped, want)
		expect.Equal(t, "missed", len(missed), 0)
	}
	if _, err := b.Acquire(bg, tick("e", 5, 0)); !errors.Is(err, lease.ErrAlreadyRan) {
		t.Fatalf("the same tick again (another replica's): %v, want already ran: buffered once", err)
	}
	sameTicks(t, "the buffered ticks run, oldest first, each once", drainBuffer(t, a, l), at(3, 4, 5))

	l = mustAcquire(t, a, driver.Request{Task: "t", Entity: "f", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
	age := 90 * time.Second
	queueBusy(t, b, tick("f", 1, age))
	queueBusy(t, b, tick("f", 2, age))
	dropped, missed := queueBusy(t, b, tick("f", 3, age))
	expect.Equal(t, "dropped", len(dropped), 0)
	sameTicks(t, "missed: the tick 2m before the newest", missed, at(1))
	sameTicks(t, "the buffered ticks run", drainBuffer(t, a, l), at(2, 3))
}
