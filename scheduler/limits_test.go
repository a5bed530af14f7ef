package scheduler

import (
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestLimitedRunsWaitWithTheirTick: runs a limit has no room for are not
// skipped: each waits as a due run with its tick, and runs once the limit
// has room; none runs twice.
func TestLimitedRunsWaitWithTheirTick(t *testing.T) {
	for _, withRedis := range []bool{false, true} {
		e := newEnv(t, withRedis)
		e.start(`
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
	}
}
