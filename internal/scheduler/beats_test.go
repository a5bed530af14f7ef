package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/pingtest"
	"github.com/tickd/tickd/tasks"
)

// TestHeartbeatsOncePerTickForTheFleet: two replicas fan out each tick of
// two tasks whose heartbeat_url names them ({task}); the monitor hears
// each tick's start once and its end once, after its start: success for
// the task whose runs all succeed, fail with the tick's summary for the
// one with a failing run.
func TestHeartbeatsOncePerTickForTheFleet(t *testing.T) {
	e := newEnv(t, true)
	m := pingtest.Start(t)
	e.rec.body = func(ctx context.Context, r tasks.Run) (tasks.Result, error) {
		if r.Entity == "bad-1" {
			return tasks.Done, errors.New("boom")
		}
		return tasks.Done, nil
	}
	task := func(name string) string {
		return fmt.Sprintf("[[tasks]]\nname = %q\nevery = \"1s\"\nhandler = \"rec\"\nentities = [\"%[1]s-0\", \"%[1]s-1\", \"%[1]s-2\"]\n", name)
	}
	toml := fmt.Sprintf("[defaults]\nheartbeat_url = %q\n", m.URL+"/{task}") + task("ok") + task("bad")
	opts := func(replica string) Options {
		return Options{Store: e.store(replica), DuePoll: 20 * time.Millisecond, PausePoll: 100 * time.Millisecond, Version: "9.9.9"}
	}
	s1, s2 := e.run(toml, opts("r1")), e.run(toml, opts("r2"))
	ended := func(runs []*pingtest.Run, check string) (n int) {
		for _, r := range runs {
			if r.Check == "/"+check && len(r.Ends) > 0 {
				n++
			}
		}
		return n
	}
	expect.WaitFor(t, 30*time.Second, "3 ticks of each task ended", func() bool {
		runs := m.Runs()
		return ended(runs, "ok") >= 3 && ended(runs, "bad") >= 3
	})
	judged := m.Runs()
	stopWithin(s1, 5*time.Second)
	stopWithin(s2, 5*time.Second)
	expect.Equal(t, "the pings' User-Agent", m.Pings()[0].Agent, "tickd/9.9.9")
	for _, r := range m.Runs() {
		if r.Starts != 1 || len(r.Ends) > 1 || r.EndFirst {
			t.Fatalf("%s rid %s: %d starts, ends %+v, an end first: %v; want one start, then at most one end", r.Check, r.RID, r.Starts, r.Ends, r.EndFirst)
		}
	}
	for _, r := range judged {
		if len(r.Ends) == 0 {
			continue
		}
		end := r.Ends[0]
		switch r.Check {
		case "/ok":
			expect.Equal(t, "ok's end", end.Kind, "success")
		case "/bad":
			expect.Equal(t, "bad's end", end.Kind, "fail")
			expect.True(t, "the summary says a run failed: "+end.Body, strings.Contains(end.Body, "runs 3: done 2, failed 1"))
			expect.True(t, "the summary names the entity that failed: "+end.Body, strings.Contains(end.Body, `failed: "bad-1" (tickd history -failures)`))
		}
	}
}
