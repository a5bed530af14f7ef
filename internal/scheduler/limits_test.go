package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
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
			rs, err := st.Ticks(context.Background(), "lim", 10)
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
