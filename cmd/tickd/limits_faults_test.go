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
	"github.com/tickd/tickd/internal/testkit/tier"
)

// mostAtOnce is the most runs going on at once, a run without an end
// taken to end at openEnd(r).
func mostAtOnce(runs []tickdtest.Run, openEnd func(tickdtest.Run) int64) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, r := range runs {
		end := r.End.At
		if end == 0 {
			end = openEnd(r)
		}
		edges = append(edges, edge{r.Start.At, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// faultConfig is three replicas' config for a fault under a limit of 4 at
// once: 24 entities whose runs take 2s, ticking every 10s, on the Redis
// the [redis] table's keys say.
func faultConfig(redisTOML, worker string) string {
	return fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
%s
key_prefix = "limf"

[[limits]]
name = "api"
concurrency = 4

[[tasks]]
name = "sync"
every = "10s"
command = [%q, "2s"]
lease_ttl = "3s"
limits = ["api"]
entities = %s
`, redisTOML, worker, entityList(24))
}

// startThree writes config to a new directory and starts three replicas
// on it, A, B and C, whose workers write to the log it returns.
func startThree(t *testing.T, config string) (procs []*tickdtest.Proc, logPath string) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, config)
	logPath = filepath.Join(dir, "runs.log")
	for _, name := range []string{"A", "B", "C"} {
		procs = append(procs, tickdtest.Start(t, name, []string{"TESTWORKER_LOG=" + logPath}, "run", "-config", cfg))
	}
	return procs, logPath
}

// waitGoing waits until n runs of the log are going on at once.
func waitGoing(t *testing.T, logPath string, n int) {
	expect.WaitFor(t, 30*time.Second, fmt.Sprintf("%d runs going on", n), func() bool {
		going := 0
		for _, r := range tickdtest.ReadRuns(t, logPath) {
			if r.End.At == 0 {
				going++
			}
		}
		return going == n
	})
}

// waitEndedSince waits up to d until n runs of the log that started after
// since (Unix ns) have ended.
func waitEndedSince(t *testing.T, logPath string, since int64, n int, d time.Duration, what string) {
	expect.WaitFor(t, d, what, func() bool {
		ended := 0
		for _, r := range tickdtest.ReadRuns(t, logPath) {
			if r.Start.At > since && r.End.At != 0 {
				ended++
			}
		}
		return ended >= n
	})
}

// checkAtMostFour fails the test if more than 4 runs of the log went on at
// once, those still going counted until now.
func checkAtMostFour(t *testing.T, logPath, across string) {
	runs := tickdtest.ReadRuns(t, logPath)
	now := time.Now().UnixNano()
	most := mostAtOnce(runs, func(tickdtest.Run) int64 { return now })
	t.Logf("%d runs; at most %d at once", len(runs), most)
	if most > 4 {
		t.Fatalf("%d runs at once under a limit of 4 across %s", most, across)
	}
}

// TestLimitHoldsWhenAReplicaIsKilled: a replica killed (kill -9) while its
// runs hold the limit: its places are counted until its leases could no
// longer be trusted, never given to more than the limit at once, then
// taken by the others, which run every entity the killed one did not.
func TestLimitHoldsWhenAReplicaIsKilled(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	started, logPath := startThree(t, faultConfig(fmt.Sprintf("url = %q", srv.URL()), worker))
	procs := map[int]*tickdtest.Proc{}
	for _, p := range started {
		procs[p.Pid()] = p
	}
	// The first replica seen running under the limit is killed.
	var victim *tickdtest.Proc
	expect.WaitFor(t, 30*time.Second, "a replica running under the limit", func() bool {
		for _, r := range tickdtest.ReadRuns(t, logPath) {
			if r.End.At == 0 && procs[r.Start.Ppid] != nil {
				victim = procs[r.Start.Ppid]
				return true
			}
		}
		return false
	})
	victim.Signal(syscall.SIGKILL)
	killed := time.Now().UnixNano()
	// Two ticks after the kill: the other replicas run under the whole
	// limit again.
	waitEndedSince(t, logPath, killed, 30, 40*time.Second, "two ticks' runs after the kill")
	runs := tickdtest.ReadRuns(t, logPath)
	now := time.Now().UnixNano()
	openEnd := func(r tickdtest.Run) int64 {
		if r.Start.Ppid == victim.Pid() {
			return killed // the killed replica's runs die with it (Pdeathsig)
		}
		return now // still going on
	}
	most := mostAtOnce(runs, openEnd)
	after := mostAtOnce(slices.DeleteFunc(slices.Clone(runs), func(r tickdtest.Run) bool { return r.Start.At < killed }), openEnd)
	t.Logf("%d runs; at most %d at once, %d after the kill", len(runs), most, after)
	if most > 4 {
		t.Fatalf("%d runs at once under a limit of 4", most)
	}
	expect.True(t, "the others used the whole limit after the kill", after == 4)
}

// TestLimitHoldsAcrossAnEmptiedRedis: Redis restarted empty while runs
// hold the limit: its counts are gone with the rest, and the data-loss
// quarantine covers them: nothing starts until every run that counted has
// stopped, so never more than the limit at once; then the runs go on.
func TestLimitHoldsAcrossAnEmptiedRedis(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	_, logPath := startThree(t, faultConfig(fmt.Sprintf("url = %q", srv.URL()), worker))
	waitGoing(t, logPath, 4)
	srv.Restart()
	waitEndedSince(t, logPath, time.Now().UnixNano(), 12, 40*time.Second, "runs after the restart")
	checkAtMostFour(t, logPath, "a Redis emptied")
}

// TestLimitHoldsAcrossASentinelFailover: the primary killed while runs hold
// the limit, Sentinel promotes the replica: a start taken under the limit
// is in the primary's replication stream before the grant the replicas
// acknowledge, so the new primary counts every run that can go on; never
// more than the limit at once, and the runs resume on the new primary.
func TestLimitHoldsAcrossASentinelFailover(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{Sentinels: true})
	tickdtest.InitEpoch(t, pair.Primary.Addr, "limf")
	_, worker := tickdtest.Binaries(t)
	_, logPath := startThree(t, faultConfig(pair.SentinelTOML(), worker))
	waitGoing(t, logPath, 4)
	pair.Primary.Stop()
	killed := time.Now()
	expect.WaitFor(t, 60*time.Second, "Sentinel to promote the replica", func() bool {
		return redistest.MasterAddr(pair.Sentinels[0].Addr) == pair.Replica.Addr
	})
	promoted := time.Now()
	t.Logf("promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
	waitEndedSince(t, logPath, promoted.UnixNano(), 12, 60*time.Second, "runs on the new primary")
	checkAtMostFour(t, logPath, "a failover")
}
