package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// TestBackfillGoesOnWhereItStopped: a backfill whose replica stopped
// after its first tick (its cursor there, no holder) is taken by one of
// two replicas, which runs the ticks after its cursor, oldest first,
// each (entity, tick) at most once between live runs and backfills by the
// run record (b's 05:00, run by the replica that stopped, and a's 08:00,
// run live, do not run again), leaves out its Unknown ticks, and saves
// its end with its counts.
func TestBackfillGoesOnWhereItStopped(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		ten, now, at := halfPastTen()
		first := e.store("r1")
		ranBefore(t, first, driver.ReasonTick, "a", at(8), "")     // live, recorded
		ranBefore(t, first, driver.ReasonBackfill, "b", at(5), "") // by the replica that stopped: it saved no progress for 05:00
		bf := driver.Backfill{ID: "b1", Task: "hourly", From: at(4), To: at(8), Unknown: []time.Time{at(7)}, Total: 5, By: "op", Created: at(9),
			Cursor: at(4), Ticks: 1, Ran: 3}
		saveBackfill(t, first, bf)
		cfg := hourly("a", "b", "c")
		e.run(cfg, at10(first, now))
		if withRedis { // a second replica (the in-process store has one: its holder is one)
			e.run(cfg, at10(e.store("r2"), now))
		}
		end := backfillEnd(t, first)
		runs := e.rec.snapshot()
		slices.SortStableFunc(runs, func(a, b runRec) int { return cmp.Compare(a.Fence, b.Fence) })
		for _, r := range runs {
			expect.Equal(t, "a run's reason", r.Reason, driver.ReasonBackfill)
		}
		got := atHours(runs, ten)
		slices.Sort(got[:2]) // a tick's entities start in any order
		slices.Sort(got[2:5])
		slices.Sort(got[5:])
		expect.Equal(t, "the runs, tick by tick", fmt.Sprint(got), "[05:a 05:c 06:a 06:b 06:c 08:b 08:c]")
		expect.Equal(t, "its cursor", end.Cursor, at(8))
		expect.Equal(t, "its counts: ticks, runs, run before, busy", fmt.Sprint(end.Ticks, end.Ran, end.Skipped, end.Busy), "4 10 2 0")
	})
}

// TestOlderTicksWaitForTheLimits: under a limit of one run at a time, a
// start after an outage runs the latest tick's runs first, then the older
// missed ticks' (catch_up_runs = "all") and a backfill's, which wait in
// the limit's line behind the live ticks' runs (in the fan-out, not as
// the entity's due run): each (entity, tick) once, with its reason, and
// never two runs at once.
func TestOlderTicksWaitForTheLimits(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		ten, now, at := halfPastTen()
		var inFlight, most atomic.Int32
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return tasks.Done, nil
		}
		st := e.store("r1")
		bf := driver.Backfill{ID: "b1", Task: "hourly", From: at(1), To: at(3), Total: 3, By: "op", Created: now}
		saveBackfill(t, st, bf)
		e.run(`
[[limits]]
name = "api"
concurrency = 1

[[tasks]]
name = "hourly"
every = "1h"
catch_up = "7h"
catch_up_runs = "all"
catch_up_max = 4
run_record = "720h"
limits = ["api"]
entities = ["a", "b", "c"]
handler = "rec"
`, at10(st, now))
		// 10:00 live; 07:00, 08:00 and 09:00 caught up (catch_up_max 4);
		// 01:00 to 03:00 backfilled.
		expect.WaitFor(t, 30*time.Second, "7 ticks of 3 entities", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 21 })
		runs := e.rec.snapshot()
		slices.SortStableFunc(runs, func(a, b runRec) int { return a.start.Compare(b.start) })
		seen := map[string]bool{}
		for i, r := range runs {
			k := atHour(r, ten)
			expect.True(t, k+" ran once", !seen[k])
			seen[k] = true
			reason := driver.ReasonCatchUp
			switch h := r.Tick.Sub(ten) / time.Hour; {
			case h == 0:
				reason = driver.ReasonTick
				expect.True(t, k+", a live tick's run, starts before every older tick's", i < 3)
			case h < -6:
				reason = driver.ReasonBackfill
			}
			expect.Equal(t, k+": its reason", r.Reason, reason)
		}
		expect.Equal(t, "runs", len(runs), 21)
		expect.Equal(t, "the most runs at once, under a limit of 1", most.Load(), int32(1))
	})
}

// TestBackfillOfEveryRunRunsEachOnceInIt: a backfill of every run again
// (-only all) runs the (entity, tick)s that ran before too (08:00 a, run
// live), each once in it: 07:00 b, which it ran before its replica
// stopped (no progress saved), is not run again.
func TestBackfillOfEveryRunRunsEachOnceInIt(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		ten, now, at := halfPastTen()
		first := e.store("r1")
		ranBefore(t, first, driver.ReasonTick, "a", at(8), "")
		ranBefore(t, first, driver.ReasonBackfill, "b", at(7), "b1")
		bf := driver.Backfill{ID: "b1", Task: "hourly", From: at(7), To: at(8), Total: 2, Only: driver.BackfillAll, By: "op", Created: at(9)}
		saveBackfill(t, first, bf)
		e.run(hourly("a", "b", "c"), at10(first, now))
		end := backfillEnd(t, first)
		got := atHours(e.rec.snapshot(), ten)
		slices.Sort(got)
		expect.Equal(t, "the runs", fmt.Sprint(got), "[07:a 07:c 08:a 08:b 08:c]")
		expect.Equal(t, "its counts: ticks, runs, run before", fmt.Sprint(end.Ticks, end.Ran, end.Skipped), "2 5 1")
	})
}

// TestBackfillOfAGoneReplicasShare: a backfill's fan-out is not cut into
// chunks, and still comes back to the shards it set aside for a replica
// that died (revisit): every run of the range runs once. Its revisit
// divided by a chunk length of 0, and the replicas panicked (the nemesis
// found it).
func TestBackfillOfAGoneReplicasShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	ten, now, at := halfPastTen()
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	cfg := hourly(ids...) + "shards = 3\n"
	gone := e.store("r1")
	if err := gone.Fleet().Announce(context.Background(), []string{"hourly"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	saveBackfill(t, gone, driver.Backfill{ID: "b1", Task: "hourly", From: at(7), To: at(8), Total: 60, Only: driver.BackfillAll, By: "op", Created: at(9)})
	for _, r := range []string{"r0", "r2"} {
		st := e.store(r)
		if err := st.Fleet().Announce(context.Background(), []string{"hourly"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		e.run(cfg, at10(st, now))
	}
	end := backfillEnd(t, gone)
	seen := map[string]int{}
	for _, h := range atHours(e.rec.snapshot(), ten) {
		if h < "09" {
			seen[h]++
		}
	}
	expect.Equal(t, "runs of the range", len(seen), 60)
	expect.Equal(t, "its runs", end.Ran, 60)
}

// hourly is task hourly's config, every hour over entities, its run
// record kept 30 days, run by the test's recording handler.
func hourly(entities ...string) string {
	quoted := make([]string, len(entities))
	for i, e := range entities {
		quoted[i] = strconv.Quote(e)
	}
	return fmt.Sprintf("\n[[tasks]]\nname = \"hourly\"\nevery = \"1h\"\nrun_record = \"720h\"\nentities = [%s]\nhandler = \"rec\"\n",
		strings.Join(quoted, ", "))
}

// at10 are the options of a replica on st whose clock says now (half past
// ten, halfPastTen), polling for due runs every 20ms.
func at10(st *lease.Store, now time.Time) Options {
	return Options{Store: st, Clock: shiftedClock(time.Until(now)), DuePoll: 20 * time.Millisecond}
}

// atHour names run r by its tick's hour (ten is 10:00) and its entity:
// "08:a".
func atHour(r runRec, ten time.Time) string {
	return fmt.Sprintf("%02d:%s", int(r.Tick.Sub(ten)/time.Hour)+10, r.Entity)
}

// atHours is atHour of each of runs, in their order.
func atHours(runs []runRec, ten time.Time) []string {
	var got []string
	for _, r := range runs {
		got = append(got, atHour(r, ten))
	}
	return got
}

// saveBackfill saves bf on st, as tickd backfill does.
func saveBackfill(t *testing.T, st *lease.Store, bf driver.Backfill) {
	t.Helper()
	if ok, err := st.Fleet().SaveBackfill(context.Background(), bf, 0); err != nil || !ok {
		t.Fatal(ok, err)
	}
}

// ranBefore runs task hourly's entity at tick T on st, for reason (and
// the record of, when not ""), before the test's replicas start.
func ranBefore(t *testing.T, st *lease.Store, reason driver.Reason, entity string, T time.Time, of string) {
	t.Helper()
	l, err := st.Acquire(context.Background(), driver.Request{Task: "hourly", Entity: entity, TTL: time.Minute, Reason: reason, Tick: T, Record: BackfillRecord, RecordOf: of})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(context.Background(), driver.Finished{Outcome: driver.OutcomeDone}, nil); err != nil {
		t.Fatal(err)
	}
}

// backfillEnd waits for the one backfill st keeps to end, and returns it.
func backfillEnd(t *testing.T, st *lease.Store) driver.Backfill {
	t.Helper()
	var end driver.Backfill
	expect.WaitFor(t, 20*time.Second, "the backfill to end", func() bool {
		bs, err := st.Fleet().Backfills(context.Background())
		if err != nil || len(bs) != 1 {
			return false
		}
		end = bs[0]
		return !end.Ended.IsZero()
	})
	return end
}

// TestBackfillOfTheFailedRuns: a run of a tick that fails is kept so in
// the tick's run record, and a backfill of the failed runs (-only failed)
// runs those alone, once each: 07:00 b, whose run failed, and not 07:00
// a, whose run did not; its run failing again keeps it failed, and a
// second backfill runs it again; that one succeeding clears it.
func TestBackfillOfTheFailedRuns(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		ten, now, at := halfPastTen()
		first := e.store("r1")
		ranBefore(t, first, driver.ReasonTick, "a", at(7), "")
		ranBefore(t, first, driver.ReasonTick, "b", at(7), "")
		if err := first.Fleet().RunRecords().MarkFailed(context.Background(), "hourly", at(7), "b", true, time.Hour); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
			if calls.Add(1) == 1 {
				return tasks.Done, errors.New("the API said no")
			}
			return tasks.Done, nil
		}
		failed := func() []bool {
			rec, err := first.Fleet().RunRecords().Read(context.Background(), "hourly", []time.Time{at(7)}, []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			return rec[0].Failed
		}
		e.run(hourly("a", "b"), at10(first, now))
		for i, want := range [][]bool{{false, true}, nil} { // the first run fails again, the second succeeds
			bf := driver.Backfill{ID: fmt.Sprint("f", i), Task: "hourly", From: at(7), To: at(7), Total: 1, Only: driver.BackfillFailed, By: "op", Created: now}
			saveBackfill(t, first, bf)
			expect.WaitFor(t, 20*time.Second, bf.ID+" to end", func() bool {
				bs, err := first.Fleet().Backfills(context.Background())
				return err == nil && slices.ContainsFunc(bs, func(b driver.Backfill) bool { return b.ID == bf.ID && !b.Ended.IsZero() })
			})
			expect.WaitFor(t, 10*time.Second, "the failed runs kept", func() bool { return slices.Equal(failed(), want) })
		}
		got := atHours(e.rec.snapshot(), ten)
		expect.Equal(t, "the runs", fmt.Sprint(got), "[07:b 07:b]")
	})
}

// TestBackfillInZones: a backfill of a task with timezone_from runs each
// entity at its own zone's ticks of the range: a (Tokyo) at 00:00 UTC, b
// (the task's zone, UTC) at 09:00, each day once; c, whose zone is no
// zone, never.
func TestBackfillInZones(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		file := filepath.Join(t.TempDir(), "shops.jsonl")
		if err := os.WriteFile(file, []byte("{\"id\": \"a\", \"tz\": \"Asia/Tokyo\"}\n{\"id\": \"b\"}\n{\"id\": \"c\", \"tz\": \"Nope/Zone\"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		st := e.store("r1")
		day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
		bf := driver.Backfill{ID: "z1", Task: "z", From: day, To: day.Add(33 * time.Hour), Total: 4, By: "op", Created: time.Now()}
		saveBackfill(t, st, bf)
		e.run(fmt.Sprintf("[[tasks]]\nname = \"z\"\ncron = \"0 9 * * *\"\nhandler = \"rec\"\nrun_record = \"720h\"\nentities_file = %q\nentities_format = \"jsonl\"\ntimezone_from = \"tz\"\n", file),
			Options{Store: st, DuePoll: 20 * time.Millisecond})
		end := backfillEnd(t, st)
		var got []string
		for _, r := range e.rec.snapshot() {
			expect.Equal(t, "a run's reason", r.Reason, driver.ReasonBackfill)
			got = append(got, fmt.Sprintf("%s@%s", r.Entity, r.Tick.UTC().Sub(day)))
		}
		slices.Sort(got)
		expect.Equal(t, "the runs", fmt.Sprint(got), "[a@0s a@24h0m0s b@33h0m0s b@9h0m0s]")
		expect.Equal(t, "its ticks", end.Ticks, 4)
	})
}
