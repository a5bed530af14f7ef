package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// TestCatchUpRunsAll: with catch_up_runs = "all", a start after an outage
// runs the latest missed tick first (reason tick), then every older tick
// within catch_up that no replica fanned out (no tick record), oldest
// first, each once with its own tick (reason catch_up), at most
// catch_up_max in all, but for a tick skipped for a pause; two replicas starting at once run each (entity,
// tick) once between them, by the run record.
func TestCatchUpRunsAll(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, withRedis bool) {
		e := newEnv(t, withRedis)
		ten, now, at := halfPastTen()
		first := e.store("r1")
		// 08:00 ran (a replica fanned it out): it is not caught up.
		if err := first.Fleet().RecordTicks(context.Background(), []driver.TickWrite{{Task: "hourly", Tick: at(8),
			Part: driver.TickPart{Replica: "r0", Final: true, Written: at(8), Entities: 3, Started: 3}, Keep: driver.DefaultHistory()}}); err != nil {
			t.Fatal(err)
		}
		// 07:00 was skipped for a pause: not missed.
		if err := first.Fleet().RecordAction(context.Background(), driver.Action{Task: "hourly", At: at(7).Add(-time.Minute), By: "op",
			What: driver.ActionPause, Until: at(7).Add(time.Minute)}, driver.DefaultHistory()); err != nil {
			t.Fatal(err)
		}
		cfg := `
[[tasks]]
name = "hourly"
every = "1h"
catch_up = "7h"
catch_up_runs = "all"
catch_up_max = 4
entities = ["a", "b", "c"]
handler = "rec"
`
		for _, st := range []*lease.Store{first, e.store("r2")} { // two replicas starting at once
			e.run(cfg, Options{Store: st, Clock: shiftedClock(time.Until(now)), DuePoll: 20 * time.Millisecond})
		}
		// 04:00, 05:00, 06:00, 07:00 (paused) and 09:00 did not run;
		// catch_up_max 4 runs 10:00 and the newest 3 older ones but the
		// paused 07:00: 04:00 stays missed.
		want := []time.Time{at(10), at(5), at(6), at(9)}
		expect.WaitFor(t, 20*time.Second, "4 ticks of 3 entities", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 12 })
		runs := e.rec.snapshot()
		slices.SortStableFunc(runs, func(a, b runRec) int { return cmp.Compare(a.Fence, b.Fence) }) // in the order of their grants
		seen := map[string]bool{}
		var order []time.Time
		for _, r := range runs {
			k := fmt.Sprint(r.Entity, "@", r.Tick.UTC().Sub(ten))
			expect.True(t, k+" ran once", !seen[k])
			seen[k] = true
			if len(order) == 0 || !order[len(order)-1].Equal(r.Tick) {
				order = append(order, r.Tick.UTC())
			}
			reason := driver.ReasonCatchUp
			if r.Tick.Equal(at(10)) {
				reason = driver.ReasonTick
			}
			expect.Equal(t, k+": its reason", r.Reason, reason)
		}
		expect.Equal(t, "runs", len(runs), 12)
		expect.Equal(t, "the ticks, in the order of their grants", fmt.Sprint(order), fmt.Sprint(want))
	})
}

// halfPastTen is 10:30 of a clock shifted a few hours back (now), where
// the history keeps its records (a week) and no tick is ahead of the
// store's clock: ten is 10:00, at(h) h o'clock, of that day.
func halfPastTen() (ten, now time.Time, at func(h int) time.Time) {
	ten = time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Hour)
	return ten, ten.Add(30 * time.Minute), func(h int) time.Time { return ten.Add(time.Duration(h-10) * time.Hour) }
}
