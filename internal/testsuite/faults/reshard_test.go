package faults

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// The reshard scenario: the case that ran entities twice. A task of 240
// entities in 16 shards on a 3-master Cluster, runs of up to 3s (renewed
// across a move), a tick every 5s, two replicas, each with a config file of
// its own.
const (
	rsEntities = 240
	rsEvery    = 5 * time.Second
	rsTask     = "big"
)

// reshardConfig is the scenario's config, the task in shards shards.
func reshardConfig(cl *redistest.Cluster, worker string, shards int) string {
	ids := make([]string, rsEntities)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("e", i))
	}
	return fmt.Sprintf(`[daemon]
shutdown_timeout = "1s"
log_format = "json"
log_level = "debug"
[redis]
key_prefix = "faults"
cluster_addrs = [%q]
[[tasks]]
name = %q
every = %q
lease_ttl = %q
concurrency = 150
shards = %d
command = [%q]
entities = [%s]
`, cl.Nodes[0].Addr, rsTask, rsEvery.String(), rcTTL.String(), shards, worker, strings.Join(ids, ", "))
}

// TestReshardWhileRunning: tickd migrate reshards a task while its
// replicas run it, in every order of the steps an operator may take: 16 →
// 8 shards with both replicas' configs still saying 16; one replica's
// config reloaded to 8 while the other never is; that other restarted;
// back to 16; then to 5 right as a tick fans out. Through all of it: no
// two runs of one entity overlap, no tick runs twice, fences increase,
// and every entity runs at every tick. Before, the reloaded replica kept
// its 16 while the restarted one read 8: 612 overlaps, 800 ticks run twice.
func TestReshardWhileRunning(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	e := &rcEnv{t: t, cl: redistest.StartCluster(t), every: rsEvery, tasks: []string{rsTask}}
	for i := range rsEntities {
		e.entities = append(e.entities, fmt.Sprint("e", i))
	}
	bin, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	e.runsLog = filepath.Join(dir, "runs.log")
	cfgs := []string{filepath.Join(dir, "r0.toml"), filepath.Join(dir, "r1.toml")}
	for _, c := range cfgs {
		tickdtest.WriteFile(t, c, reshardConfig(e.cl, worker, 16))
	}
	env := []string{"TESTWORKER_LOG=" + e.runsLog, "TESTWORKER_MAX_SLEEP=3s"}
	start := func(i int) *tickdtest.Proc {
		p := tickdtest.Start(t, fmt.Sprint("r", i), env, "-config", cfgs[i])
		e.procs = append(e.procs, p)
		return p
	}
	reps := []*tickdtest.Proc{start(0), start(1)}
	expect.WaitFor(t, 40*time.Second, "a tick's runs", func() bool { return len(tickdtest.ReadRuns(t, e.runsLog)) >= rsEntities })
	from := time.Now().Truncate(rsEvery).Add(rsEvery)
	migrate := func(to int, want string) {
		t.Helper()
		cfg := filepath.Join(dir, fmt.Sprint("migrate-", to, ".toml"))
		tickdtest.WriteFile(t, cfg, reshardConfig(e.cl, worker, to))
		out, err := exec.Command(bin, "migrate", "-config", cfg).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			failf(t, "tickd migrate to %d: %v\n%s", to, err, out)
		}
		t.Logf("migrate to %d: %s", to, strings.TrimSpace(string(out)))
	}
	nextTick := func(after time.Duration) { sleepUntil(time.Now().Truncate(rsEvery).Add(rsEvery + after)) }

	nextTick(2 * time.Second) // mid-tick: runs under way, renewed across the move
	migrate(8, rsTask+": 16 → 8 shards")
	nextTick(time.Second)
	tickdtest.WriteFile(t, cfgs[0], reshardConfig(e.cl, worker, 8)) // r1's config is never reloaded
	reps[0].Signal(syscall.SIGHUP)
	nextTick(2 * time.Second)
	reps[1].Signal(syscall.SIGTERM)
	if code := reps[1].Wait(30 * time.Second); code != 0 {
		failf(t, "r1 exited %d on SIGTERM", code)
	}
	reps[1] = start(1) // reads the recorded 8, though its config says 16
	nextTick(time.Second)
	migrate(16, rsTask+": 8 → 16 shards")
	nextTick(50 * time.Millisecond) // as a tick fans out
	migrate(5, rsTask+": 16 → 5 shards")
	nextTick(0)
	nextTick(0)
	to := time.Now().Truncate(rsEvery).Add(-rsEvery) // the last tick whose runs have ended
	sleepUntil(to.Add(2 * rsEvery))
	ran, eligible, missed := e.liveness(from, to)
	f := e.stop("reshard while running", fmt.Sprintf("liveness=%.4f (%d/%d)", float64(ran)/float64(eligible), ran, eligible))
	if eligible == 0 || float64(ran) < 0.99*float64(eligible) {
		failf(t, "liveness %d of %d eligible (entity, tick) pairs; missed e.g. %v", ran, eligible, missed)
	}
	expect.True(t, fmt.Sprintf("tick runs: %d", f.TickRuns), f.TickRuns > 5*rsEntities)
}
