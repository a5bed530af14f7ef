package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pingtest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// TestLimitedRunsWaitWithTheirTick: runs a limit has no room for are not
// skipped: each waits as a due run with its tick, and runs once the limit
// has room; none runs twice.
func TestLimitedRunsWaitWithTheirTick(t *testing.T) {
	t.Parallel()
	for _, withRedis := range []bool{false, true} {
		e := newEnv(t, withRedis)
		_, st := e.start(`
[[limits]]
name = "api"
rate = "20/s"

[[tasks]]
name = "lim"
every = "1h"
catch_up = "1h"
handler = "rec"
limits = ["api"]
entities = ["a", "b", "c", "d", "e", "f", "g", "h"]
`)
		expect.WaitFor(t, 15*time.Second, "every entity ran", func() bool { return e.rec.count(func(runRec) bool { return true }) >= 8 })
		ran := map[string]int{}
		for _, r := range e.rec.snapshot() {
			ran[r.Entity]++
		}
		expect.Equal(t, "entities run", len(ran), 8)
		// The tick's record counts the runs that waited, their outcomes and
		// how long the tick took with the waits.
		var rec driver.TickRecord
		expect.WaitFor(t, 10*time.Second, "the tick's record with every run", func() bool {
			rs, err := st.Fleet().Ticks(context.Background(), "lim", 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Final() && r.Runs() == 8 {
					rec = r
					return true
				}
			}
			return false
		})
		p := rec.Parts[0]
		t.Logf("record: started %d, skipped %v, outcomes %v, last end %v after the tick", p.Started, p.Skipped, p.Outcomes, p.LastEnd)
		expect.Equal(t, "runs waiting still, once all ran", rec.Waiting(), 0)
		expect.Equal(t, "the part's skips: none (the runs that waited ran)", len(p.Skipped), 0)
		expect.True(t, "the last end is at the rate's pace (7 starts at 20/s)", p.LastEnd >= 300*time.Millisecond)
	}
}

// TestLimitedTicksEndUnderLastingOverload: a limit that can run about half
// of what the ticks ask for, for good, over two replicas. Each entity has one waiting run, so
// a tick's run that still waits when the entity's next tick comes is
// superseded by it: every tick's record ends (its runs ran, were
// superseded, or failed) within two ticks of its own, not "waiting" for
// good.
func TestLimitedTicksEndUnderLastingOverload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	// The API takes 2 runs at once, and answers a third with a 429 (a
	// Retry-After of 300ms); the limit lets 3 go at once.
	var inFlight atomic.Int32
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		defer inFlight.Add(-1)
		if inFlight.Add(1) > 2 {
			return tasks.Done, &tasks.BackoffError{After: 300 * time.Millisecond, Reason: "429"}
		}
		select {
		case <-time.After(200 * time.Millisecond):
			return tasks.Done, nil
		case <-ctx.Done():
			return tasks.Done, context.Cause(ctx)
		}
	}
	m := pingtest.Start(t)
	toml := `
[[limits]]
name = "api"
concurrency = 3

[[tasks]]
name = "lim"
every = "1s"
heartbeat_url = "` + m.URL + `/lim"
handler = "rec"
limits = ["api"]
entities = ` + entities(20) + "\n"
	_, st := e.start(toml)
	e.start(toml) // two replicas: each one's fan-out meets the limit for the same entities
	var recs []driver.TickRecord
	expect.WaitFor(t, 30*time.Second, "eight ticks recorded", func() bool {
		rs, err := st.Fleet().Ticks(context.Background(), "lim", 50)
		if err != nil {
			t.Fatal(err)
		}
		recs = rs
		return len(rs) >= 8
	})
	newest := recs[0].Tick
	old := 0
	for _, r := range recs {
		if newest.Sub(r.Tick) < 3*time.Second {
			continue // young enough to wait still
		}
		old++
		if !r.Final() || r.Waiting() > 0 {
			t.Errorf("tick %s, %v before the newest, not ended: final %v, waiting %d, parts %+v", r.Tick.Format(time.TimeOnly), newest.Sub(r.Tick), r.Final(), r.Waiting(), r.Parts)
		}
	}
	// And the monitor hears each of those ticks end.
	expect.WaitFor(t, 10*time.Second, fmt.Sprintf("the heartbeat ends of the %d ended ticks", old), func() bool {
		ended := 0
		for _, r := range m.Runs() {
			if len(r.Ends) > 0 {
				ended++
			}
		}
		return ended >= old
	})
}

// TestRetryKeepsItsTicksPlaceInLine: a run retried after a back-off (a
// 429) keeps its tick's place in the limit's line, ahead of a newer tick's
// run that waits; before, it came back behind every run that asked while
// it waited its back-off out.
func TestRetryKeepsItsTicksPlaceInLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	release := make(chan struct{})
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Entity == "blocker" {
			<-release
		}
		return tasks.Done, nil
	}
	toml := `
[[limits]]
name = "api"
concurrency = 1

[[tasks]]
name = "lim"
every = "1h"
handler = "rec"
limits = ["api"]
entities = ["blocker", "a", "x"]
`
	_, st := e.start(toml)
	ctx := context.Background()
	if err := st.Enqueue(ctx, driver.Due{Task: "lim", Entity: "blocker", Reason: driver.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 10*time.Second, "the blocker holds the limit", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
	T1 := time.Now().Add(-time.Hour).Truncate(time.Hour)
	if _, err := st.EnqueueWaiting(ctx, driver.Due{Task: "lim", Entity: "x", Reason: driver.ReasonTick, Tick: T1.Add(30 * time.Minute)}, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Enqueue(ctx, driver.Due{Task: "lim", Entity: "a", Reason: driver.ReasonRetry, Tick: T1, Attempt: 1}, 0); err != nil {
		t.Fatal(err)
	}
	lim := leaseconf.Limits(e.config(toml))[0]
	expect.WaitFor(t, 10*time.Second, "both wait in the limit's line", func() bool {
		ls, err := st.Fleet().LimitStatus(ctx, lim)
		return err == nil && ls.Waiting == 2
	})
	close(release)
	expect.WaitFor(t, 10*time.Second, "both ran", func() bool { return e.rec.count(func(runRec) bool { return true }) == 3 })
	runs := e.rec.snapshot()
	expect.Equal(t, "the run after the blocker", runs[1].Entity, "a")
}
