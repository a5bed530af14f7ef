package faults

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/lease/redisdriver"
)

// The Redis Cluster scenarios: three tickd replicas on a Redis Cluster of
// three masters with a replica each, six tasks spread over the masters and
// a seventh in 16 shards, whose entities are on every master, a tick every
// second.
const (
	rcTasks    = 6
	rcEntities = 15
	rcEvery    = time.Second
	rcTTL      = 3 * time.Second
	rcSharded  = "spread"
	rcShards   = 16
)

// rcEnv is a Redis Cluster with three tickd replicas on it.
type rcEnv struct {
	t      *testing.T
	cl     *redistest.Cluster
	tasks  []string
	master map[string]*redistest.Server // task -> the master serving it at the start
	// entityMaster: the sharded task's entity -> the master of its shard.
	entityMaster map[string]*redistest.Server
	runsLog      string
	procs        []*tickdtest.Proc
	// entities are every task's ids, each tick every; startRC's unless
	// a scenario sets its own.
	entities []string
	every    time.Duration
}

func startRC(t *testing.T) *rcEnv {
	e := &rcEnv{t: t, cl: redistest.StartCluster(t), master: map[string]*redistest.Server{}, entityMaster: map[string]*redistest.Server{}, every: rcEvery}
	for i := range rcEntities {
		e.entities = append(e.entities, fmt.Sprint("e", i))
	}
	// Six tasks whose slots spread over every master.
	per := map[*redistest.Server]int{}
	for i := 0; len(e.tasks) < rcTasks && i < 1000; i++ {
		name := fmt.Sprint("task-", i)
		m := e.cl.MasterOf(t, redisdriver.TaskKey("faults", name))
		if per[m] >= rcTasks/3 {
			continue
		}
		per[m]++
		e.tasks = append(e.tasks, name)
		e.master[name] = m
	}
	if len(per) < 3 {
		expect.Fatalf(t, "tasks on %d masters, want 3", len(per))
	}
	e.tasks = append(e.tasks, rcSharded)
	masters := map[*redistest.Server]int{}
	for i := range rcEntities {
		id := fmt.Sprint("e", i)
		shard := driver.ShardName(rcSharded, driver.ShardOf(id, rcShards))
		e.entityMaster[id] = e.cl.MasterOf(t, redisdriver.TaskKey("faults", shard))
		masters[e.entityMaster[id]]++
	}
	if len(masters) < 3 {
		expect.Fatalf(t, "the sharded task's entities on %d masters, want 3", len(masters))
	}
	_, worker := tickdtest.Binaries(t)
	dir := t.TempDir()
	e.runsLog = filepath.Join(dir, "runs.log")
	ids := make([]string, rcEntities)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("e", i))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[daemon]\nshutdown_timeout = \"1s\"\nlog_format = \"json\"\nlog_level = \"debug\"\n[redis]\nkey_prefix = \"faults\"\ncluster_addrs = [%q]\n[defaults]\nlease_ttl = %q\n",
		e.cl.Nodes[0].Addr, rcTTL.String())
	for _, task := range e.tasks {
		fmt.Fprintf(&b, "[[tasks]]\nname = %q\nevery = %q\ncommand = [%q]\nentities = [%s]\n", task, rcEvery.String(), worker, strings.Join(ids, ", "))
		if task == rcSharded {
			fmt.Fprintf(&b, "shards = %d\n", rcShards)
		}
	}
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, b.String())
	for i := range replicas {
		e.procs = append(e.procs, tickdtest.Start(t, fmt.Sprint("r", i), []string{"TESTWORKER_LOG=" + e.runsLog, "TESTWORKER_MAX_SLEEP=200ms"}, "-config", cfg))
	}
	// A new cluster is quarantined for one lease TTL; then every task runs.
	expect.WaitFor(t, 30*time.Second, "every task running", func() bool { return len(e.tasksRunSince(time.Time{})) == len(e.tasks) })
	return e
}

// triggers is a store for triggering runs as tickd trigger does; it
// checked the key layout before any fault (a store checks it before its
// first write, and refuses while that check cannot be made).
func (e *rcEnv) triggers() func(task, entity string) {
	s := e.store()
	trigger := func(task, entity string, delay time.Duration) {
		if err := s.Enqueue(context.Background(), driver.Due{Task: task, Entity: entity, Reason: driver.ReasonTrigger}, delay); err != nil {
			expect.Fatalf(e.t, "trigger %s/%s: %v", task, entity, err)
		}
	}
	trigger(e.tasks[0], "warm-up", time.Hour)
	return func(task, entity string) { trigger(task, entity, 0) }
}

// tasksRunSince lists the tasks with a run started at or after since.
func (e *rcEnv) tasksRunSince(since time.Time) map[string]bool {
	out := map[string]bool{}
	for _, r := range tickdtest.ReadRuns(e.t, e.runsLog) {
		if r.Start.At >= since.UnixNano() {
			out[r.Start.Task] = true
		}
	}
	return out
}

// stop stops the replicas (SIGTERM) and checks every run: no overlap, no
// tick run twice, fences increasing per entity.
func (e *rcEnv) stop(name string, extra string) tickdtest.Figures {
	t := e.t
	for _, p := range e.procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range e.procs {
		if code := p.Wait(30 * time.Second); code != 0 {
			failf(t, "%s exited %d on SIGTERM", p.Name, code)
		}
	}
	runs := tickdtest.ReadRuns(t, e.runsLog)
	f := tickdtest.Check(runs, tickdtest.OpenEndByLog(tickdtest.LoggedEnds(tickdtest.Logs(e.procs...)), time.Now()))
	row := fmt.Sprintf("%-22s tasks=%d masters=3 runs=%-5d tick_runs=%-5d overlaps=%d dup_tick_runs=%d fence_violations=%d %s",
		name, len(e.tasks), f.Runs, f.TickRuns, f.Overlaps, f.DuplicateTickRuns, f.FenceViolations, extra)
	t.Log(row)
	tableMu.Lock()
	table = append(table, row)
	tableMu.Unlock()
	if f.Overlaps != 0 || f.DuplicateTickRuns != 0 || f.FenceViolations != 0 {
		failf(t, "guarantees broken: %v\n%s", f, strings.Join(f.Examples, "\n"))
	}
	return f
}

// tickRuns counts, per task, the tick runs for ticks in [from, to).
func (e *rcEnv) tickRuns(from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range tickdtest.ReadRuns(e.t, e.runsLog) {
		tick, err := time.Parse(time.RFC3339Nano, r.Start.Tick)
		if r.Start.Reason == "tick" && err == nil && !tick.Before(from) && tick.Before(to) {
			out[r.Start.Task]++
		}
	}
	return out
}

// store is a store on the Cluster, as an operator command opens one.
func (e *rcEnv) store() *lease.Store {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.cl.Addrs(), MaxRetries: -1, ClusterStateReloadInterval: time.Second})
	e.t.Cleanup(func() { c.Close() })
	s, err := stores.Redis(c, "faults", lease.Options{})
	if err != nil {
		expect.Fatalf(e.t, "%v", err)
	}
	e.t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// ticksDone says whether every replica is done with every tick in
// [from, to) of every task: its record has a part from each, all final
// (a replica writes its part of every tick it fans out).
func (e *rcEnv) ticksDone(s *lease.Store, from, to time.Time) bool {
	for _, task := range e.tasks {
		recs, err := s.Fleet().Ticks(context.Background(), task, 50)
		if err != nil {
			return false
		}
		done := 0
		for _, r := range recs {
			if !r.Tick.Before(from) && r.Tick.Before(to) && len(r.Parts) == replicas && r.Final() {
				done++
			}
		}
		if done < int(to.Sub(from)/rcEvery) {
			return false
		}
	}
	return true
}

// liveness judges the ticks in [from, to) by the fault suite's one rule
// (judge): a run's lease is held until its end, and a moment after
// (releaseLag: it is released once its process has ended); a run that
// never ended holds it for good.
func (e *rcEnv) liveness(from, to time.Time) (ran, eligible int, missed []string) {
	const releaseLag = 100 * time.Millisecond
	held := func(r tickdtest.Run) int64 {
		if r.End.At == 0 {
			return math.MaxInt64
		}
		return r.End.At + releaseLag.Nanoseconds()
	}
	var ticks []time.Time
	for T := from; T.Before(to); T = T.Add(e.every) {
		ticks = append(ticks, T)
	}
	replicaLogs := tickdtest.Logs(e.procs...)
	ends := tickdtest.LoggedEnds(replicaLogs)
	releasedAt := func(r tickdtest.Run) int64 { return ends[r.ID()].Released }
	runs := tickdtest.ReadRuns(e.t, e.runsLog)
	holds, stopped := unrecorded(runs, replicaLogs, rcTTL)
	v := judge{every: e.every, heldUntil: held, released: releasedAt, skippedBusy: skips(replicaLogs, logs.MsgSkippedBusy), heldBy: heldSkips(replicaLogs), superseded: skips(replicaLogs, logs.MsgAlreadyRan), tookPlace: tookPlace(replicaLogs),
		stopped: stopped}.liveness(append(runs, holds...), e.tasks, e.entities, ticks)
	return v.ran, v.eligible, v.missed
}

// mostTasks is the master that serves the most tasks, and its tasks.
func (e *rcEnv) mostTasks() (*redistest.Server, map[string]bool) {
	by := map[*redistest.Server]map[string]bool{}
	for task, m := range e.master {
		if by[m] == nil {
			by[m] = map[string]bool{}
		}
		by[m][task] = true
	}
	var best *redistest.Server
	for m, ts := range by {
		if best == nil || len(ts) > len(by[best]) {
			best = m
		}
	}
	return best, by[best]
}

// TestRedisClusterSteady: every entity of every task runs at every tick,
// once, on a Cluster, with acknowledgement per shard.
func TestRedisClusterSteady(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	e := startRC(t)
	// The tick after start-up is left out: its runs may have started late
	// (the quarantine of a new Redis ended during it).
	from := time.Now().Truncate(rcEvery).Add(2 * rcEvery)
	to := from.Add(5 * rcEvery)
	// Judged once every replica is done with the five ticks (on a loaded
	// machine, a fan-out may reach its last entities seconds late); a
	// replica that skipped one (a catch-up runs only the latest tick)
	// never is: then judged after a minute, as it stands.
	s := e.store()
	expect.WaitFor(t, 20*time.Second, "five ticks", func() bool { return time.Now().After(to.Add(2 * rcEvery)) })
	expect.Within(time.Minute, func() bool { return e.ticksDone(s, from, to) })
	got := e.tickRuns(from, to)
	ran, eligible, missed := e.liveness(from, to)
	e.stop("cluster steady", fmt.Sprintf("liveness=%.4f (%d/%d) tick_runs_per_task=%s", float64(ran)/float64(eligible), ran, eligible, sortedCounts(got)))
	if ran != eligible || eligible < 4*rcTasks*rcEntities {
		failf(t, "%d of %d eligible (task, entity, tick) ran; missed: %v", ran, eligible, missed)
	}
}

// TestRedisClusterMasterKilled: kill -9 of the master that serves the most
// tasks, and some of the sharded task's shards; its replica is promoted
// (cluster-node-timeout 2s). The other masters' tasks, and the sharded
// task's entities on them, keep running through it, the killed master's
// resume by themselves, and no guarantee breaks.
func TestRedisClusterMasterKilled(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	e := startRC(t)
	m, its := e.mostTasks()
	trigger := e.triggers()
	killed := time.Now()
	m.Stop()
	// A trigger for another master's task, made during the failover, runs
	// during it: the due loop takes from the shards that answer. Its entity
	// is in no task's list: a listed one is busy with its tick's run about
	// a fifth of the time, and a trigger that finds its entity busy is
	// skipped (on_busy = "skip"), which made this check fail now and then.
	var other string
	for _, task := range e.tasks {
		if !its[task] && task != rcSharded { // the sharded task's trigger may be for a shard of the killed master
			other = task
		}
	}
	trigger(other, "triggered-during-failover")
	expect.WaitFor(t, 30*time.Second, "its replica promoted", func() bool { return len(e.cl.Masters(t)) == 3 })
	e.cl.WaitHealthy(t)
	healed := time.Now()
	during := e.tickRuns(killed.Truncate(rcEvery).Add(rcEvery), healed)
	expect.WaitFor(t, 30*time.Second, "every task running again", func() bool {
		return len(e.tasksRunSince(healed.Add(rcEvery))) == len(e.tasks)
	})
	expect.WaitFor(t, 30*time.Second, "the sharded task's entities of the killed master running again", func() bool {
		ran := map[string]bool{}
		for _, r := range tickdtest.ReadRuns(t, e.runsLog) {
			ran[r.Start.Entity] = ran[r.Start.Entity] || r.Start.Task == rcSharded && r.Start.At >= healed.UnixNano()
		}
		for id, em := range e.entityMaster {
			if em == m && !ran[id] {
				return false
			}
		}
		return true
	})
	resumed := time.Since(healed)
	e.stop("cluster master kill -9", fmt.Sprintf("killed_tasks=%d failover=%v resumed_within=%v", len(its), healed.Sub(killed).Round(100*time.Millisecond), resumed.Round(100*time.Millisecond)))
	for _, task := range e.tasks {
		if !its[task] && during[task] == 0 && healed.Sub(killed) > 2*rcEvery {
			failf(t, "%s (another master's) did not run during the failover", task)
		}
	}
	// Granted during it: the fence is Redis's clock at the grant. The
	// worker's own start is later by its exec, 0.2-0.6s on a loaded
	// machine, where a trigger granted in the last second of a 5s
	// failover started its worker after it.
	triggered := false
	for _, r := range tickdtest.ReadRuns(t, e.runsLog) {
		triggered = triggered || r.Start.Task == other && r.Start.Reason == "trigger" && time.UnixMicro(r.Start.Fence).Before(healed)
	}
	if !triggered && healed.Sub(killed) > 2*rcEvery {
		failf(t, "a trigger of %s (another master's) made during the failover did not run during it", other)
	}
}

// TestRedisClusterMasterRestartedEmpty: a master restarted at once without
// its data (no persistence). Its buckets lost their epochs: its tasks are
// quarantined for one lease TTL, the other tasks keep running, and no
// lease is granted twice.
func TestRedisClusterMasterRestartedEmpty(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	masterRestarted(t, "cluster master empty", func(m *redistest.Server) time.Time {
		at := time.Now()
		m.Restart()
		return at
	})
}

// TestRedisClusterMasterRestartedFromAnOlderSnapshot: a master killed and
// restarted from an RDB snapshot taken a tick and a half before: its
// epochs look intact, the leases and tick records since are gone. Its
// tasks are quarantined as if it came back empty, and only its.
func TestRedisClusterMasterRestartedFromAnOlderSnapshot(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	masterRestarted(t, "cluster master from a snapshot", func(m *redistest.Server) time.Time {
		snap := m.Snapshot()
		sleepUntil(time.Now().Add(rcEvery + rcEvery/2)) // a tick's grants land after the snapshot
		at := time.Now()
		m.RestartFrom(snap)
		return at
	})
}

// masterRestarted restarts, by restart (which answers when the master's
// data went), the master with the most tasks, and checks that its tasks, and its shards of the sharded one, are
// quarantined for one lease TTL while the others run on.
func masterRestarted(t *testing.T, name string, restart func(*redistest.Server) time.Time) {
	e := startRC(t)
	m, its := e.mostTasks()
	restarted := restart(m)
	e.cl.WaitHealthy(t)
	// Within the quarantine (one lease TTL after the first acquire that found
	// the epoch gone) none of its tasks is granted; the others are. A run
	// granted before the restart may start after it: its fence, Redis's
	// clock in µs at the grant, says which.
	quiet := restarted.Add(rcTTL - 500*time.Millisecond)
	expect.WaitFor(t, 20*time.Second, "the quarantine over", func() bool { return time.Now().After(restarted.Add(rcTTL + 3*rcEvery)) })
	var early []string
	others := map[string]bool{}
	for _, r := range tickdtest.ReadRuns(t, e.runsLog) {
		at := time.Unix(0, r.Start.At)
		if r.Start.Fence < restarted.UnixMicro() || at.After(quiet) {
			continue
		}
		// The sharded task's entities on the emptied master are quarantined
		// too, and only those.
		if its[r.Start.Task] || r.Start.Task == rcSharded && e.entityMaster[r.Start.Entity] == m {
			early = append(early, fmt.Sprintf("%s/%s at +%v", r.Start.Task, r.Start.Entity, at.Sub(restarted).Round(time.Millisecond)))
		} else {
			others[r.Start.Task] = true
		}
	}
	expect.WaitFor(t, 30*time.Second, "the emptied master's tasks running again", func() bool {
		return len(e.tasksRunSince(restarted.Add(rcTTL))) == len(e.tasks)
	})
	var resumed time.Duration
	for _, r := range tickdtest.ReadRuns(t, e.runsLog) {
		if at := time.Unix(0, r.Start.At); its[r.Start.Task] && r.Start.Fence >= restarted.UnixMicro() && (resumed == 0 || at.Sub(restarted) < resumed) {
			resumed = at.Sub(restarted)
		}
	}
	e.stop(name, fmt.Sprintf("quarantined_tasks=%d others_running=%d/%d its_tasks_resumed_after=%v",
		len(its), len(others), len(e.tasks)-len(its), resumed.Round(100*time.Millisecond)))
	if len(early) > 0 {
		failf(t, "runs of the emptied master's tasks during its quarantine: %v", early)
	}
	if len(others) != len(e.tasks)-len(its) {
		failf(t, "%d of %d other tasks ran during the quarantine", len(others), len(e.tasks)-len(its))
	}
}

func sortedCounts(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, ",")
}
