package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// TestLimitServesWaitingRunsInOrder: a limit that has room for about half
// of a tick's runs, shared by two replicas, over several ticks: the runs
// that wait are served the oldest first, so every entity runs at least
// once every ⌈asked ÷ room⌉ + 1 ticks (room: the runs a tick had, as
// measured), and no entity runs much more often than another. Each tick's
// record counts every run of the tick, whichever replica ran it and however
// late, and says how many wait still. Before, whoever asked first after a
// run ended got its place: some entities ran every tick and others waited
// for many.
//
// TICKD_FAIR="entities every_s run limit seconds" runs another case (the
// issue's: "30 4 1s 3 60").
func TestLimitServesWaitingRunsInOrder(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	entities, every, runFor, limit, seconds := 16, 2, "500ms", 2, 16
	if v := os.Getenv("TICKD_FAIR"); v != "" {
		if _, err := fmt.Sscan(v, &entities, &every, &runFor, &limit, &seconds); err != nil {
			t.Fatalf("TICKD_FAIR=%q: %v", v, err)
		}
	}
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
shutdown_timeout = "3s"
log_format = "json"

[redis]
url = %q
key_prefix = "fair"

[[limits]]
name = "crm"
concurrency = %d

[[tasks]]
name = "sync"
every = "%ds"
command = [%q, %q]
lease_ttl = "3s"
concurrency = 4
limits = ["crm"]
entities = %s
`, srv.URL(), limit, every, worker, runFor, entityList(entities)))
	logPath := filepath.Join(dir, "runs.log")
	var procs []*tickdtest.Proc
	for _, name := range []string{"A", "B"} {
		p := tickdtest.Start(t, name, []string{"TESTWORKER_LOG=" + logPath}, "run", "-config", cfg)
		p.WaitReady(20 * time.Second)
		procs = append(procs, p)
	}
	var first int64
	expect.WaitFor(t, 30*time.Second, "the first run", func() bool {
		if runs := tickdtest.ReadRuns(t, logPath); len(runs) > 0 {
			first = runs[0].Start.At
			return true
		}
		return false
	})
	end := first + int64(time.Duration(seconds)*time.Second)
	expect.WaitFor(t, time.Duration(2*seconds)*time.Second, "runs over the window", func() bool {
		runs := tickdtest.ReadRuns(t, logPath)
		return runs[len(runs)-1].Start.At > end
	})
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		expect.Equal(t, p.Name+"'s exit", p.Wait(20*time.Second), 0)
	}
	runs := tickdtest.ReadRuns(t, logPath)
	f := tickdtest.Check(runs, tickdtest.OpenEndByLog(tickdtest.LoggedEnds(tickdtest.Logs(procs...)), time.Now()))
	expect.Equal(t, "overlaps", f.Overlaps, 0)
	expect.Equal(t, "a tick run twice", f.DuplicateTickRuns, 0)

	// The window: the ticks from the first run's, for seconds.
	firstTick := time.Unix(0, first).Truncate(time.Duration(every) * time.Second)
	ticks := seconds / every
	starts := map[string][]int64{}
	inWindow := 0
	for _, r := range runs {
		if r.Start.At < end {
			starts[r.Start.Entity] = append(starts[r.Start.Entity], r.Start.At)
			inWindow++
		}
	}
	room := float64(inWindow) / float64(ticks)
	bound := time.Duration((int(float64(entities)/room+0.999)+1)*every) * time.Second
	longest, fewest, most := time.Duration(0), 1<<30, 0
	for i := range entities {
		e := fmt.Sprint("u", i)
		at := append([]int64{firstTick.UnixNano()}, starts[e]...)
		slices.Sort(at[1:])
		at = append(at, end)
		for j := 1; j < len(at); j++ {
			longest = max(longest, time.Duration(at[j]-at[j-1]))
		}
		fewest, most = min(fewest, len(starts[e])), max(most, len(starts[e]))
		if testing.Verbose() {
			var ds []string
			for _, a := range at[1 : len(at)-1] {
				ds = append(ds, time.Duration(a-firstTick.UnixNano()).Round(100*time.Millisecond).String())
			}
			t.Logf("%s: %v", e, ds)
		}
	}
	t.Logf("%d runs over %d ticks (room %.1f a tick for %d entities): runs per entity %d to %d; longest between two starts of an entity %v (bound %v)",
		inWindow, ticks, room, entities, fewest, most, longest.Round(time.Millisecond), bound)
	// A tick's fan-out and the due loop take part of a second: slack of one.
	expect.True(t, fmt.Sprintf("every entity runs at least every ⌈asked ÷ room⌉ + 1 ticks: longest %v, bound %v", longest, bound), longest <= bound+time.Second)
	least := int(time.Duration(seconds) * time.Second / bound)
	expect.True(t, fmt.Sprintf("every entity ran at least %d times: runs per entity %d to %d", least, fewest, most), fewest >= least)

	// Each tick's record counts the runs that carry its tick.
	byTick := map[time.Time]int{}
	for _, r := range runs {
		T, err := time.Parse(time.RFC3339Nano, r.Start.Tick)
		if err != nil {
			t.Fatalf("tick %q: %v", r.Start.Tick, err)
		}
		byTick[T.UTC()]++
	}
	code, out, errs := cli("history", "-config", cfg, "-json", "-limit", "100", "sync")
	if code != 0 {
		t.Fatal(errs)
	}
	waitingTicks := 0
	for _, x := range decodeJSON(t, out)["ticks"].([]any) {
		tk := x.(map[string]any)
		T, _ := time.Parse(time.RFC3339Nano, tk["tick"].(string))
		if tk["state"] == "missed" {
			continue
		}
		expect.Equal(t, fmt.Sprintf("tick %s (%s): runs in its record", T.Format(time.TimeOnly), tk["state"]), int(tk["runs"].(float64)), byTick[T.UTC()])
		skipped, _ := tk["skipped"].(map[string]any)
		waiting, _ := skipped["limited"].(float64)
		if tk["state"] == "waiting" {
			waitingTicks++
			expect.True(t, "a waiting tick counts its waiting runs", waiting > 0)
		} else {
			expect.Equal(t, fmt.Sprintf("tick %s (%s): runs waiting", T.Format(time.TimeOnly), tk["state"]), waiting, 0.0)
		}
	}
	t.Logf("%d ticks recorded with runs waiting when the replicas stopped", waitingTicks)
}
