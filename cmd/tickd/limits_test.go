package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// limitConfig is three replicas' config: one task of 40 entities whose
// runs take 1s, under the limit given, with one tick in the next minute, 5s
// from now (after the first start's quarantine).
func limitConfig(redisURL, worker, limit string) string {
	at := time.Now().UTC().Add(5 * time.Second)
	return fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
url = %q
key_prefix = "lim"

[[limits]]
name = "api"
%s

[[tasks]]
name = "sync"
cron = "%d %d %d * * *"
command = [%q, "1s"]
lease_ttl = "3s"
concurrency = 8
limits = ["api"]
entities = %s
`, redisURL, limit, at.Second(), at.Minute(), at.Hour(), worker, entityList(40))
}

// runLimited starts three replicas on cfg, waits until every entity ran
// once, stops them, and returns the runs, each with its start and end.
func runLimited(t *testing.T, limit string) []tickdtest.Run {
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, limitConfig(srv.URL(), worker, limit))
	logPath := filepath.Join(dir, "runs.log")
	env := []string{"TESTWORKER_LOG=" + logPath}
	var procs []*tickdtest.Proc
	for _, name := range []string{"A", "B", "C"} {
		procs = append(procs, tickdtest.Start(t, name, env, "run", "-config", cfg))
	}
	var runs []tickdtest.Run
	expect.WaitFor(t, 60*time.Second, "every entity's run ended", func() bool {
		runs = tickdtest.ReadRuns(t, logPath)
		ended := map[string]bool{}
		for _, r := range runs {
			if r.End.At != 0 {
				ended[r.Start.Entity] = true
			}
		}
		return len(ended) == 40
	})
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if c := p.Wait(20 * time.Second); c != 0 {
			t.Fatalf("%s exited %d", p.Name, c)
		}
	}
	runs = tickdtest.ReadRuns(t, logPath)
	expect.Equal(t, "runs (each entity once: one tick)", len(runs), 40)
	return runs
}

// TestLimitConcurrencyAcrossReplicas: three replicas, a limit of 4 at once:
// never more than 4 runs at once across them, by the worker's own start
// and end records, and every entity runs in the tick (none is skipped).
func TestLimitConcurrencyAcrossReplicas(t *testing.T) {
	runs := runLimited(t, "concurrency = 4")
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	pids := map[int]bool{}
	for _, r := range runs {
		edges = append(edges, edge{r.Start.At, 1}, edge{r.End.At, -1})
		pids[r.Start.Ppid] = true
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	t.Logf("at most %d at once, over %d replicas", most, len(pids))
	if most > 4 {
		t.Fatalf("%d runs at once under a limit of 4", most)
	}
	expect.True(t, "the limit was used to the full", most == 4)
	expect.True(t, "more than one replica ran", len(pids) > 1)
}

// TestLimitRateAcrossReplicas: three replicas, 5 starts a second, burst 1:
// no second holds more than 6 starts across them.
func TestLimitRateAcrossReplicas(t *testing.T) {
	runs := runLimited(t, `rate = "5/s"`)
	var starts []int64
	for _, r := range runs {
		starts = append(starts, r.Start.At)
	}
	slices.Sort(starts)
	most := 0
	for i := range starts {
		j := i
		for j < len(starts) && starts[j]-starts[i] < int64(time.Second) {
			j++
		}
		most = max(most, j-i)
	}
	span := time.Duration(starts[len(starts)-1] - starts[0])
	t.Logf("at most %d starts in a second; 40 starts over %v", most, span)
	if most > 6 {
		t.Fatalf("%d starts within one second at 5/s", most)
	}
	expect.True(t, fmt.Sprintf("40 starts at 5/s took %v: about 8s", span), span > 6*time.Second && span < 20*time.Second)
}
