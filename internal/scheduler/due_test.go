package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

func TestQueuedFollowUpRunsAfterNotDuring(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		release := make(chan struct{})
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			if r.Reason == "tick" {
				<-release
			}
			return tasks.Done, nil
		}
		_, st := e.start(`
[[tasks]]
name = "q"
every = "1h"
catch_up = "1h"
on_busy = "queue"
handler = "rec"
lease_ttl = "3s"
`)
		expect.WaitFor(t, 10*time.Second, "first run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
		// Data changed: ask for a run while the first one is going (three times).
		for range 3 {
			if err := st.Enqueue(context.Background(), driver.Due{Task: "q", Entity: "q", Reason: driver.ReasonTrigger}, 0); err != nil {
				t.Fatal(err)
			}
			expect.WaitFor(t, 5*time.Second, "trigger taken", func() bool {
				n := 0
				st.Fleet().DueEntries(context.Background(), "", func(driver.Due) error { n++; return nil }) //nolint:errcheck
				return n == 0
			})
		}
		if n := e.rec.count(func(runRec) bool { return true }); n != 1 {
			t.Fatalf("%d runs while the first holds the lease", n)
		}
		close(release)
		expect.WaitFor(t, 10*time.Second, "follow-up", func() bool { return e.rec.count(func(runRec) bool { return true }) == 2 })
		runs := e.rec.snapshot()
		if runs[1].Reason != "queued" || runs[1].start.Before(runs[0].end) {
			t.Fatalf("follow-up %+v started %v, first ended %v", runs[1].Run, runs[1].start, runs[0].end)
		}
		// Exactly one follow-up: once it has ended and released, nothing is
		// pending (a second follow-up would have been enqueued by that
		// release, atomically with it).
		e.ev.waitFor(t, 5*time.Second, "the follow-up's end", func(ev Event) bool { return ev.Kind == EventRunEnded && ev.Reason == driver.ReasonQueued })
		state, err := st.Fleet().Entity(context.Background(), "q", "q")
		if err != nil {
			t.Fatal(err)
		}
		if state.Pending != nil || state.Held != nil {
			t.Errorf("after the follow-up: pending %+v, held %+v; want neither", state.Pending, state.Held)
		}
		if n := e.rec.count(func(runRec) bool { return true }); n != 2 {
			t.Errorf("%d runs, want 2", n)
		}
	})
}

// TestDueRunDuringARolloutWaits: a trigger taken by a replica whose config
// does not yet have the task (a rollout) is left for a replica that has it,
// not dropped (it used to be dropped at once); only a task no replica runs
// is dropped.
func TestDueRunDuringARolloutWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	oldCfg := "[[tasks]]\nname = \"old\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	newCfg := oldCfg + "[[tasks]]\nname = \"new\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	_, st := e.start(oldCfg) // r1: takes due runs every 20ms, does not know "new"
	// r2 has "new" but takes no due run for now: it only announces its tasks.
	e.run(newCfg, Options{Store: e.store("r2"), DuePoll: time.Hour, PausePoll: 50 * time.Millisecond})
	expect.WaitFor(t, 5*time.Second, "r2's tasks announced", func() bool { ok, _ := st.Fleet().Known(context.Background(), "new"); return ok })
	if err := st.Enqueue(context.Background(), driver.Due{Task: "new", Entity: "x", Reason: driver.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	deferredByR1 := func(ev Event) bool { return ev.Kind == EventDueDeferred && ev.Replica == "r1" && ev.Task == "new" }
	expect.WaitFor(t, 10*time.Second, "r1 to leave the run twice", func() bool { return e.ev.count(deferredByR1) >= 2 })
	expect.Equal(t, "runs dropped", e.ev.count(kind(EventDueDropped)), 0)
	state, err := st.Fleet().Entity(context.Background(), "new", "x")
	if err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the trigger is still pending", state.Pending != nil)

	// A replica that has the task carries it out.
	e.start(newCfg)
	expect.WaitFor(t, 10*time.Second, "the trigger's run", func() bool {
		return e.rec.count(func(r runRec) bool { return r.Task == "new" && r.Entity == "x" }) == 1
	})

	// A task no replica runs is dropped.
	if err := st.Enqueue(context.Background(), driver.Due{Task: "ghost", Entity: "y", Reason: driver.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	e.ev.waitFor(t, 30*time.Second, "the ghost's run dropped", func(ev Event) bool { return ev.Kind == EventDueDropped && ev.Task == "ghost" })
	state, _ = st.Fleet().Entity(context.Background(), "ghost", "y")
	expect.True(t, "the ghost's run is gone", state.Pending == nil)
}

// TestDueRunGetsASlotUnderBacklog: runs longer than the interval keep late
// fan-outs waiting for every slot the moment it frees; a due run (here a
// trigger) still gets a slot within a bounded time, instead of being given
// back for ever.
func TestDueRunGetsASlotUnderBacklog(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			if r.Reason == "tick" {
				select {
				case <-ctx.Done():
				case <-time.After(700 * time.Millisecond): // the run's work: longer than the interval
				}
			}
			return tasks.Done, nil
		}
		_, st := e.start(`
[[tasks]]
name = "slow"
every = "1s"
concurrency = 1
handler = "rec"
lease_ttl = "3s"
entities = ["a", "b", "c"]
`)
		expect.WaitFor(t, 15*time.Second, "a backlog of tick runs", func() bool {
			return e.rec.count(func(r runRec) bool { return r.Reason == "tick" }) >= 3
		})
		if err := st.Enqueue(context.Background(), driver.Due{Task: "slow", Entity: "a", Reason: driver.ReasonTrigger}, 0); err != nil {
			t.Fatal(err)
		}
		expect.WaitFor(t, 3*dueSlotWait/2, "the trigger's run", func() bool {
			return e.rec.count(func(r runRec) bool { return r.Reason == "trigger" }) == 1
		})
	})
}

// TestDuplicateReplicaIDIsWarned: two replicas given one replica_id run
// (their leases stay exclusive), but each is told, at WARN, that another
// process uses its id.
func TestDuplicateReplicaIDIsWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cfg := "[[tasks]]\nname = \"d\"\nevery = \"1h\"\nhandler = \"rec\"\n"
	for range 2 {
		st := e.redisStore("tickd", lease.Options{Replica: "same"})
		e.run(cfg, Options{Store: st, PausePoll: 50 * time.Millisecond})
	}
	e.ev.waitFor(t, 10*time.Second, "the duplicate found", func(ev Event) bool { return ev.Kind == EventDuplicateReplica })
	expect.True(t, "the duplicate warned", e.logs.countPrefix("another tickd process uses this replica_id") >= 1)
	// The replicas list flags it too, for status and the console.
	rs, err := e.redisStore("tickd", lease.Options{Replica: "reader"}).Fleet().Replicas(context.Background())
	expect.True(t, fmt.Sprintf("the duplicate flagged in the replicas list: %+v %v", rs, err), err == nil && len(rs) == 1 && rs[0].DuplicateOn != "")
}

// TestQueueMaxBuffersTicks: with on_busy = "queue" and queue_max = 2, the
// ticks that find the entity busy are buffered; past 2 the oldest is
// dropped, and its tick's record says dropped, not busy; once the holder
// ends, the buffered ticks run, oldest first, each with its own tick.
func TestQueueMaxBuffersTicks(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		release := make(chan struct{})
		first := true
		var mu sync.Mutex
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			mu.Lock()
			block := first
			first = false
			mu.Unlock()
			if block {
				<-release
			}
			return tasks.Done, nil
		}
		_, st := e.start(`
[[tasks]]
name = "q"
every = "1s"
on_busy = "queue"
queue_max = 2
handler = "rec"
lease_ttl = "3s"
`)
		// recorded reads the tick records: the ticks dropped, and whether a
		// dropped tick's record still says busy.
		recorded := func() (dropped []time.Time, busyToo bool) {
			rs, err := st.Fleet().Ticks(context.Background(), "q", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Skipped()[history.SkipDropped] > 0 {
					dropped = append(dropped, r.Tick.UTC())
					busyToo = busyToo || r.Skipped()[history.SkipBusy] > 0
				}
			}
			slices.SortFunc(dropped, time.Time.Compare)
			return dropped, busyToo
		}
		expect.WaitFor(t, 20*time.Second, "two ticks dropped from the buffer", func() bool {
			ticks, _ := recorded()
			return len(ticks) >= 2
		})
		close(release)
		T0 := e.rec.snapshot()[0].Tick.UTC()
		expect.WaitFor(t, 20*time.Second, "the two buffered ticks' runs", func() bool {
			return e.rec.count(func(r runRec) bool { return r.Reason == "queued" }) >= 2
		})
		ran := map[time.Time]bool{T0: true}
		var queued []time.Time
		for _, r := range e.rec.snapshot() {
			if r.Reason == "queued" {
				queued = append(queued, r.Tick.UTC())
			}
			ran[r.Tick.UTC()] = true
		}
		dropped, busyToo := recorded()
		expect.Equal(t, "a dropped tick's record says busy too", busyToo, false)
		expect.Equal(t, "the first tick dropped", dropped[0], T0.Add(time.Second))
		expect.True(t, fmt.Sprintf("the buffered runs' ticks %v are in order", queued), slices.IsSortedFunc(queued, time.Time.Compare))
		// Never silently: every tick from the holder's to the last run's
		// either ran or its record says dropped; a dropped one never ran.
		for T := T0; !T.After(queued[len(queued)-1]); T = T.Add(time.Second) {
			d := slices.ContainsFunc(dropped, T.Equal)
			if d == ran[T] {
				t.Errorf("tick %v: dropped %v, ran %v: want one of them", T.Format(time.TimeOnly), d, ran[T])
			}
		}
	})
}
