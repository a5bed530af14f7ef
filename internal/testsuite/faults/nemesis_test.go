package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"

	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/otlptest"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/tickdtype"
)

// The operator-chaos scenario (the nemesis): the fault suite's cluster (3
// replicas, "sync" with 200 entities, fewer on a slow machine (suiteScale),
// every 2s, judged as every scenario is), each replica with a config file and a replica id of its own, and
// beside "sync" extra tasks under a shared limit, queued or replaced
// (on_busy) when busy, with schedules that change. Every 1-3s, a seeded random choice of what
// operators do, and of faults:
//   - reload: SIGHUP to some replicas (not always all) after their config
//     changed: sync's concurrency, configured shards, catch_up_runs
//     (latest or all: every missed tick, at a replica's start) and
//     run_record (kept an hour, or not at all); extra tasks
//     added, removed and renamed, their schedules, their on_busy (queue
//     or replace: a tick stops the run it finds), their queue_max (1 to
//     3 ticks buffered) and the limit's size;
//     the zoned task's entities moved between zones, their attributes,
//     its timezone_from, its source (a file, an endpoint that fails at
//     times; nemesis_zones_test.go);
//   - backfill: tickd backfill of sync's last 20-60s (but the last 11s),
//     or -cancel of one started; kills and restarts stop and resume them;
//   - migrate: tickd migrate to a new shard count of sync, at any moment;
//     sometimes two at once, to two counts (one is refused while the other
//     moves the task);
//   - pause -for a few seconds, and resume;
//   - unlock of a running entity, and unlock -force (the one overlap a
//     documented action allows, excused for its own entity only);
//   - a flood of triggers;
//   - forget of an extra task no config runs any more;
//   - a replica stopped with SIGTERM, killed with kill -9, restarted with
//     its id; a second process started with a live replica's id (it must
//     be refused);
//   - Redis restarted empty;
//   - Redis (on a Cluster, one master) restarted from a snapshot it took
//     at an earlier act: what it loads looks intact, epochs and all, and
//     lacks every write since.
//
// The seed is logged; TICKD_NEMESIS_SEED replays it (the same choices; the
// moments they meet the runs differ), TICKD_NEMESIS_TIME sets how long the
// chaos goes on (20s unless said).

// nemesis is one scenario's state: what the configs say and what was done.
type nemesis struct {
	c      *cluster
	rnd    *rand.Rand
	bin    string
	worker string
	dir    string
	// What the next config written says.
	concurrency, shards, limit int
	autoRate                   bool           // x-api's rate = "auto"
	catchUpAll                 bool           // sync's catch_up_runs = "all"
	runRecord                  bool           // sync's run_record = "1h"
	allAgain                   [][2]time.Time // the ranges of the backfills of every run again, or the failed ones (-only all, failed)
	syncLimit                  int            // sync under a limit of this many runs at once (0: none): its catch-ups and backfills wait behind its live runs
	// backfills are the ids of the backfills of sync started, and not
	// cancelled yet.
	backfills  []string
	extras     []string // the extra tasks' names
	extraEvery map[string]string
	// replacing are the extra tasks with on_busy = "replace" (and runs
	// longer than their ticks, so that ticks replace them); the others
	// queue.
	replacing map[string]bool
	queueMax  map[string]int // the others' queue_max
	next      int            // the next extra task's number
	removed   []string
	// forced: each unlock -force, entity and when.
	forced []forcedUnlock
	log    []string // what was done, for the report
	paused bool
	// traces receives every replica's spans, all sampled; runSpans is the
	// [telemetry] run_spans the configs say (a reload changes it).
	traces   *otlptest.Receiver
	runSpans int
	// snap is the snapshot redisRollback took and restores next, of the
	// server snapped (a Cluster master, or the Redis).
	snap    string
	snapped *redistest.Server
	snapAt  time.Time
	// zoned is the task whose entities tick in zones of their own.
	zoned *zoned
	// layout2: the fleet runs on a Redis of key layout 2 (0.1.0's, no
	// chunk records) until an outage's tickd migrate moves it to layout
	// 3 (every replica stopped); the seed's lowest bit begins there.
	layout2 bool
}

type forcedUnlock struct {
	entity string
	at     int64
}

func newNemesis(t *testing.T, seed uint64, onCluster bool) *nemesis {
	var c *cluster
	if onCluster {
		rc := redistest.StartCluster(t)
		c = newClusterOn(t, rc.Nodes[0], fmt.Sprintf("cluster_addrs = [%q]", rc.Nodes[0].Addr), leaseTTL)
		c.rc = rc
	} else {
		c = newCluster(t, false)
	}
	bin, worker := tickdtest.Binaries(t)
	n := &nemesis{c: c, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), bin: bin, worker: worker, dir: c.dir,
		shards: 4, limit: 2, autoRate: true, catchUpAll: true, runRecord: true, extraEvery: map[string]string{}, replacing: map[string]bool{}, queueMax: map[string]int{}, traces: otlptest.Start(t), runSpans: 1000}
	n.syncLimit = []int{0, nEntities * 4 / 5}[n.rnd.IntN(2)] // half the seeds begin with sync's catch-up and backfill under a limit
	// Half the seeds begin with sync's tick chunks kept as records (no run
	// record, which goes entity by entity), and half with chunks of 32 (a
	// task of 128 run slots or more).
	if n.rnd.IntN(2) == 0 {
		n.catchUpAll, n.runRecord = false, false
	}
	n.concurrency = []int{80, 140}[n.rnd.IntN(2)]
	for range 2 {
		n.addExtra()
	}
	n.zoned = newZoned(t, c.dir, n.rnd)
	for i, r := range c.reps {
		r.cfg = filepath.Join(c.dir, fmt.Sprintf("r%d.toml", i))
		// e7's and e13's tick runs fail: a backfill of the failed runs has
		// some to run again.
		r.env = append(r.env, "TICKD_REPLICA_ID="+r.name, "OTEL_TRACES_SAMPLER=always_on", "TESTWORKER_FAIL=e7,e13")
		tickdtest.WriteFile(t, r.cfg, n.config())
	}
	c.excuse = tickdtest.Excuses{Overlap: n.excused, Again: n.again}
	if n.layout2 = seed&1 == 1; n.layout2 { // drawn beside rnd: a seed's other draws stay what they were
		rc := c.client()
		if err := rc.Set(context.Background(), "faults:layout", "2", 0).Err(); err != nil {
			expect.Fatalf(t, "layout 2: %v", err)
		}
	}
	n.say("begin (concurrency %d, catch_up_runs all %v, run_record %v, sync limit %d, key layout 2 %v)", n.concurrency, n.catchUpAll, n.runRecord, n.syncLimit, n.layout2)
	return n
}

// migrateLayout runs tickd migrate with every replica stopped, on a Redis
// of key layout 2: it moves it to layout 3, or, when a stopped replica's
// announcement is still current, keeps it and says so (the next outage
// tries again).
func (n *nemesis) migrateLayout() {
	out, err := n.cli("migrate")
	if err != nil {
		failf(n.c.t, "tickd migrate in an outage, on key layout 2: %v\n%s", err, out)
	}
	v, err := n.c.client().Get(context.Background(), "faults:layout").Result()
	if err != nil {
		failf(n.c.t, "the key layout after tickd migrate: %v", err)
	}
	n.layout2 = v != "3"
	n.say("migrate in the outage, on key layout 2: layout %s now: %s", v, strings.TrimSpace(out))
}

// config is the config the nemesis's state says, for replica files and
// for the operator commands.
func (n *nemesis) config() string {
	base := configWith(n.c.redis, leaseTTL, n.worker)
	base = strings.Replace(base, "concurrency = 80", fmt.Sprintf("concurrency = %d\nshards = %d", n.concurrency, n.shards), 1)
	if n.catchUpAll { // a replica that starts runs every tick of sync it and the others missed, each once
		base = strings.Replace(base, `catch_up = "10s"`, "catch_up = \"10s\"\ncatch_up_runs = \"all\"", 1)
	}
	if n.runRecord { // which entities ran each tick, for a backfill
		base = strings.Replace(base, `catch_up = "10s"`, "catch_up = \"10s\"\nrun_record = \"1h\"", 1)
	}
	if n.syncLimit > 0 {
		base = strings.Replace(base, `catch_up = "10s"`, "catch_up = \"10s\"\nlimits = [\"sync-api\"]", 1)
	}
	var b strings.Builder
	b.WriteString(base)
	if n.syncLimit > 0 {
		fmt.Fprintf(&b, "\n[[limits]]\nname = \"sync-api\"\nconcurrency = %d\n", n.syncLimit)
	}
	fmt.Fprintf(&b, "\n[[limits]]\nname = \"x-api\"\nconcurrency = %d\n", n.limit)
	if n.autoRate { // a rate learned from the runs' answers (the worker's: none said, no 429)
		b.WriteString("rate = \"auto\"\nrate_max = \"50/s\"\nburst = 3\n")
	}
	for _, x := range n.extras {
		// Every second one has a head start in x-api's line.
		if n.replacing[x] { // outside the limit, whose line would keep a tick from meeting the holder
			fmt.Fprintf(&b, "\n[[tasks]]\nname = %q\nevery = %q\nlease_ttl = \"2s\"\non_busy = \"replace\"\ncommand = [%q, \"2500ms\"]\nentities = [\"x0\", \"x1\", \"x2\"]\n",
				x, n.extraEvery[x], n.worker)
			continue
		}
		if qmax := n.queueMax[x]; qmax > 1 { // runs longer than a tick, outside the limit: the buffer fills, and drops
			fmt.Fprintf(&b, "\n[[tasks]]\nname = %q\nevery = %q\nlease_ttl = \"2s\"\non_busy = \"queue\"\nqueue_max = %d\ncommand = [%q, \"1500ms\"]\nentities = [\"x0\", \"x1\", \"x2\"]\n",
				x, n.extraEvery[x], qmax, n.worker)
			continue
		}
		fmt.Fprintf(&b, "\n[[tasks]]\nname = %q\nevery = %q\nlease_ttl = \"2s\"\non_busy = \"queue\"\nlimits = [\"x-api\"]\npriority = \"%ds\"\ncommand = [%q, \"300ms\"]\nentities = [\"x0\", \"x1\", \"x2\"]\n",
			x, n.extraEvery[x], len(x)%2, n.worker)
	}
	b.WriteString(n.zoned.config(n.worker))
	fmt.Fprintf(&b, "\n[telemetry]\nendpoint = %q\nrun_spans = %d\n", n.traces.URL, n.runSpans)
	b.WriteString(n.c.beatsConfig())
	return b.String()
}

func (n *nemesis) addExtra() {
	name := fmt.Sprint("extra-", n.next)
	n.next++
	n.extras = append(n.extras, name)
	n.extraEvery[name] = []string{"1s", "2s", "3s"}[n.rnd.IntN(3)]
	n.replacing[name] = n.rnd.IntN(2) == 0
	n.queueMax[name] = 1 + n.rnd.IntN(3)
}

func (n *nemesis) say(format string, args ...any) {
	line := fmt.Sprintf("%s "+format, append([]any{time.Now().Format(timeMs)}, args...)...)
	n.log = append(n.log, line)
}

// cli runs a tickd operator command with the nemesis's config.
func (n *nemesis) cli(args ...string) (string, error) {
	cfg := filepath.Join(n.dir, "operator.toml")
	tickdtest.WriteFile(n.c.t, cfg, n.config())
	full := append([]string{args[0], "-config", cfg}, args[1:]...)
	out, err := exec.Command(n.bin, full...).CombinedOutput()
	return string(out), err
}

// excused says whether the overlap of a and b (a first) is the one an
// unlock -force documents: a was going on at the unlock of its entity, and
// b started after it.
func (n *nemesis) excused(a, b tickdtest.Run) bool {
	for _, f := range n.forced {
		if f.entity == a.Start.Entity && a.Start.Task == "sync" && a.Start.At < f.at && b.Start.At > f.at {
			return true
		}
	}
	return false
}

// act does one random thing.
func (n *nemesis) act(until time.Time) {
	acts := []struct {
		weight int
		fn     func()
	}{
		{5, n.reload}, {3, n.migrate}, {2, n.pause}, {2, n.unlock}, {1, n.forceUnlock}, {2, n.triggers},
		{1, n.forget}, {2, n.restart}, {1, n.kill}, {1, n.outage}, {1, n.duplicate}, {1, n.redisRestart}, {2, n.redisRollback}, {1, n.migrateTwice},
		{2, n.backfill},
	}
	total := 0
	for _, a := range acts {
		total += a.weight
	}
	k := n.rnd.IntN(total)
	for _, a := range acts {
		if k -= a.weight; k < 0 {
			a.fn()
			break
		}
	}
	n.c.fault()
}

// reload changes the config and sends SIGHUP to some replicas: all of
// them, or all but one, which keeps the config it had.
func (n *nemesis) reload() {
	if n.rnd.IntN(2) == 0 {
		// sync changes in half the reloads, whatever else does: a reload
		// in the middle of its fan-out must finish that tick (checkDelivery).
		n.concurrency = map[int]int{70: 80, 80: 140, 140: 70}[n.concurrency] // 140: chunks of 32
	}
	if n.rnd.IntN(2) == 0 {
		// The zoned task changes in half the reloads too: its entities'
		// zones and attributes, timezone_from, its source (file or endpoint).
		n.say("%s", n.zoned.change(n.c.t, n.rnd))
	}
	switch n.rnd.IntN(6) {
	case 5: // [telemetry]: a reload warns that it takes a restart; the spans go on
		n.runSpans = []int{1000, 50}[n.rnd.IntN(2)]
	case 0:
		n.concurrency = []int{70, 80, 140}[n.rnd.IntN(3)] // 140: chunks of 32, which a replica left out names otherwise
		n.catchUpAll = n.rnd.IntN(3) > 0
		n.runRecord = n.rnd.IntN(2) == 0
		n.syncLimit = []int{0, 0, nEntities * 4 / 5}[n.rnd.IntN(3)]
	case 1:
		n.shards = []int{1, 2, 4, 8, 16}[n.rnd.IntN(5)] // the config's count: migrate changes the recorded one
	case 2:
		n.addExtra()
	case 3:
		if len(n.extras) > 0 { // removed, or renamed (removed and another added)
			i := n.rnd.IntN(len(n.extras))
			n.removed = append(n.removed, n.extras[i])
			n.extras = slices.Delete(n.extras, i, i+1)
			if n.rnd.IntN(2) == 0 {
				n.addExtra()
			}
		}
	case 4:
		n.limit = 1 + n.rnd.IntN(3)
		n.autoRate = n.rnd.IntN(2) == 0
		for _, x := range n.extras {
			n.extraEvery[x] = []string{"1s", "2s", "3s"}[n.rnd.IntN(3)]
			n.replacing[x] = n.rnd.IntN(2) == 0 // on_busy queue <-> replace
			n.queueMax[x] = 1 + n.rnd.IntN(3)   // a buffer of 1 to 3 ticks
		}
	}
	skip := -1
	if n.rnd.IntN(3) == 0 {
		skip = n.rnd.IntN(len(n.c.reps)) // a replica that never reloaded
	}
	for i, r := range n.c.reps {
		if i == skip {
			continue
		}
		tickdtest.WriteFile(n.c.t, r.cfg, n.config())
		r.proc.Signal(syscall.SIGHUP)
	}
	n.say("reload (concurrency %d, catch_up_runs all %v, run_record %v, sync limit %d, shards %d, limit %d (rate auto %v), extras %v (replacing %v, queue_max %v), run_spans %d; replica %d left out)", n.concurrency, n.catchUpAll, n.runRecord, n.syncLimit, n.shards, n.limit, n.autoRate, n.extras, n.replacing, n.queueMax, n.runSpans, skip)
}

func (n *nemesis) migrate() {
	to := []int{1, 2, 3, 4, 8, 16}[n.rnd.IntN(6)]
	keep := n.shards
	n.shards = to
	defer func() { n.shards = keep }()
	// A migrate cut short (a master restarted under it) leaves the task
	// marked: it is run again, as the docs say, until it goes through.
	var out string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; {
		if out, err = n.cli("migrate"); err == nil || time.Now().After(deadline) {
			break
		}
		n.say("migrate sync to %d cut short (run again): %s", to, strings.TrimSpace(out))
		sleepUntil(time.Now().Add(500 * time.Millisecond)) // the operator's pace, not a wait for a condition
	}
	if err != nil {
		failf(n.c.t, "tickd migrate to %d: %v\n%s", to, err, out)
	}
	n.say("migrate sync to %d: %s", to, strings.TrimSpace(out))
}

// migrateTwice runs two tickd migrate at once, to two different counts of
// sync: one moves the task; the other waits its turn or is refused while
// the first moves it, and says so.
func (n *nemesis) migrateTwice() {
	counts := []int{1, 2, 3, 4, 8, 16}
	a := n.rnd.IntN(len(counts))
	b := (a + 1 + n.rnd.IntN(len(counts)-1)) % len(counts)
	keep := n.shards
	defer func() { n.shards = keep }()
	type result struct {
		to  int
		out string
		err error
	}
	results := make(chan result, 2)
	for i, to := range []int{counts[a], counts[b]} {
		n.shards = to
		cfg := filepath.Join(n.dir, fmt.Sprintf("operator-%d.toml", i))
		tickdtest.WriteFile(n.c.t, cfg, n.config())
		go func() {
			out, err := exec.Command(n.bin, "migrate", "-config", cfg).CombinedOutput()
			results <- result{to, string(out), err}
		}()
	}
	for range 2 {
		r := <-results
		switch {
		case r.err == nil:
			n.say("migrate sync to %d (beside another): %s", r.to, strings.TrimSpace(r.out))
		case strings.Contains(r.out, "under way"):
			n.say("migrate sync to %d refused beside another: %s", r.to, strings.TrimSpace(r.out))
		default:
			n.say("migrate sync to %d (beside another) failed: %v %s", r.to, r.err, strings.TrimSpace(r.out))
		}
	}
}

// pause pauses sync for 2-4s, or resumes it; the ticks of a pause are not
// judged (a blackout), from the command to a second after its end.
func (n *nemesis) pause() {
	if n.paused && n.rnd.IntN(2) == 0 {
		out, err := n.cli("resume", "sync")
		if err != nil {
			n.say("resume failed: %v %s", err, strings.TrimSpace(out))
			return // still paused: tried again later, and at the end
		}
		n.c.blackout(time.Now().Add(-time.Second), time.Now().Add(time.Second))
		n.paused = false
		n.say("resume sync")
		return
	}
	d := time.Duration(2+n.rnd.IntN(3)) * time.Second
	at := time.Now()
	out, err := n.cli("pause", "-reason", "nemesis", "-for", d.String(), "sync")
	if err != nil { // a master restarting: the ticks are not judged anyway
		n.say("pause failed: %v %s", err, strings.TrimSpace(out))
	}
	n.c.blackout(at, time.Now().Add(d+time.Second))
	n.paused = true
	n.say("pause sync for %v", d)
}

// held is an entity of sync whose lease is held now, or "".
func (n *nemesis) held() string {
	var hs []string
	for _, h := range n.c.heldLeases() {
		if h.Task == "sync" {
			hs = append(hs, h.Entity)
		}
	}
	if len(hs) == 0 {
		return ""
	}
	return hs[n.rnd.IntN(len(hs))]
}

func (n *nemesis) unlock() {
	if e := n.held(); e != "" {
		out, err := n.cli("unlock", "-by", "nemesis", "sync", e)
		n.say("unlock sync %s: %v %s", e, err, strings.TrimSpace(out)) // it may have ended meanwhile: not held
	}
}

func (n *nemesis) forceUnlock() {
	e := n.held()
	if e == "" {
		return
	}
	at := time.Now()
	out, err := n.cli("unlock", "-force", "-by", "nemesis", "sync", e)
	n.c.mu.Lock()
	n.forced = append(n.forced, forcedUnlock{e, at.UnixNano()})
	n.c.mu.Unlock()
	n.say("unlock -force sync %s: %v %s", e, err, strings.TrimSpace(out))
}

func (n *nemesis) triggers() {
	args := []string{"trigger", "sync"}
	for range 5 + n.rnd.IntN(30) {
		args = append(args, fmt.Sprint("e", n.rnd.IntN(nEntities)))
	}
	if len(n.extras) > 0 && n.rnd.IntN(2) == 0 {
		args = []string{"trigger", n.extras[n.rnd.IntN(len(n.extras))]}
	}
	out, err := n.cli(args...)
	// A trigger may fail while a master restarts (CLUSTERDOWN): it says so,
	// and nothing of it was promised.
	n.say("trigger %s (%d entities): %v %s", args[1], max(len(args)-2, 3), err, strings.TrimSpace(out))
}

// backfill starts a backfill of sync's ticks from 20 to 60s ago to 11s
// ago (older than a live tick can start), or cancels one started: the
// replicas' kills, restarts and outages stop and resume them. Its runs
// count as their tick's: the checker judges that no (entity, tick) runs
// twice across live ticks, catch-ups and backfills.
func (n *nemesis) backfill() {
	if len(n.backfills) > 0 && n.rnd.IntN(3) == 0 {
		i := n.rnd.IntN(len(n.backfills))
		id := n.backfills[i]
		out, err := n.cli("backfill", "-by", "nemesis", "-cancel", id)
		if err == nil {
			n.backfills = slices.Delete(n.backfills, i, i+1)
		}
		n.say("backfill -cancel %s: %v %s", id, err, strings.TrimSpace(out))
		return
	}
	now := time.Now().UTC()
	from, to := now.Add(-time.Duration(20+n.rnd.IntN(40))*time.Second), now.Add(-11*time.Second)
	args := []string{"backfill", "-json", "-by", "nemesis", "sync", "-from", from.Format(time.RFC3339), "-to", to.Format(time.RFC3339)}
	// Every run again, or the failed ones, once: the checker lets each
	// (entity, tick) of its range run once more.
	only := []string{"missing", "missing", "missing", "missing", "missing", "all", "all", "failed"}[n.rnd.IntN(8)]
	if only != "missing" {
		args = append(args, "-only", only)
		n.allAgain = append(n.allAgain, [2]time.Time{from, to})
	}
	out, err := n.cli(args...)
	var doc struct {
		ID      string `json:"id"`
		Runs    int    `json:"runs"`
		Unknown int    `json:"unknown"`
	}
	if err == nil && json.Unmarshal([]byte(out), &doc) == nil && doc.ID != "" {
		n.backfills = append(n.backfills, doc.ID)
		n.say("backfill sync %s to %s (-only %s): %s, %d runs to start, %d ticks unknown", from.Format(timeMs), to.Format(timeMs), only, doc.ID, doc.Runs, doc.Unknown)
		return
	}
	n.say("backfill sync failed: %v %s", err, strings.TrimSpace(out)) // a master restarting: nothing was promised
}

// again is how many backfills of runs again (-only all, failed) cover sync's
// tick (RFC 3339): a failed command's range too (it may have been saved).
func (n *nemesis) again(task, tick string) int {
	T, err := time.Parse(time.RFC3339, tick)
	if task != "sync" || err != nil {
		return 0
	}
	c := 0
	for _, r := range n.allAgain { // read once the run ended

		if !T.Before(r[0].Truncate(time.Second)) && !T.After(r[1]) {
			c++
		}
	}
	return c
}

func (n *nemesis) forget() {
	if len(n.removed) == 0 {
		return
	}
	x := n.removed[n.rnd.IntN(len(n.removed))]
	out, err := n.cli("forget", "-reason", "nemesis", x)
	n.say("forget %s: %v %s", x, err, strings.TrimSpace(out))
}

// allUp waits until every replica is up (a replica restarted after a kill
// waits up to ~11s for its predecessor's announcement to lapse): the
// nemesis stops or kills one replica at a time, and liveness is owed while
// one replica runs.
func (n *nemesis) allUp() {
	for _, r := range n.c.reps {
		r.proc.WaitReady(40 * time.Second)
	}
}

func (n *nemesis) restart() {
	n.allUp()
	r := n.c.reps[n.rnd.IntN(len(n.c.reps))]
	pid := r.proc.Pid()
	n.c.mu.Lock()
	n.c.stopping[pid] = time.Now().UnixNano()
	n.c.mu.Unlock()
	r.proc.Signal(syscall.SIGTERM)
	if code := r.proc.Wait(30 * time.Second); code != 0 {
		failf(n.c.t, "%s exited %d on SIGTERM; its log ends:\n%s", r.name, code, tail(r.proc.Log(), 8))
	}
	n.c.mu.Lock()
	n.c.exited[pid] = time.Now().UnixNano()
	n.c.mu.Unlock()
	n.c.start(r)
	n.say("SIGTERM and restart %s", r.name)
}

func (n *nemesis) kill() {
	n.allUp()
	c := n.c
	r := c.reps[n.rnd.IntN(len(c.reps))]
	pid := r.proc.Pid()
	r.proc.Signal(syscall.SIGKILL)
	r.proc.Wait(10 * time.Second)
	at := time.Now()
	held := map[string]bool{}
	for _, h := range c.heldLeases() {
		if h.Task == "sync" && h.Holder == r.name {
			held[h.Entity] = true
		}
	}
	c.mu.Lock()
	c.orphaned = append(c.orphaned, orphans{held, at})
	c.killedAt[pid] = at.UnixNano()
	c.linger[pid] = interval{at, at}
	c.mu.Unlock()
	c.start(r) // it waits for its own announcement to lapse
	n.say("kill -9 and restart %s", r.name)
}

// outage stops every replica (SIGTERM) for two to three of sync's ticks,
// then starts them all: the ticks missed meanwhile are not judged (a
// blackout), and with catch_up_runs = "all" they run at the start, each
// once (as every tick, the checker judges that none runs twice).
func (n *nemesis) outage() {
	n.allUp()
	c := n.c
	from := time.Now()
	for _, r := range c.reps {
		pid := r.proc.Pid()
		c.mu.Lock()
		c.stopping[pid] = time.Now().UnixNano()
		c.mu.Unlock()
		r.proc.Signal(syscall.SIGTERM)
	}
	for _, r := range c.reps {
		if code := r.proc.Wait(30 * time.Second); code != 0 {
			failf(c.t, "%s exited %d on SIGTERM; its log ends:\n%s", r.name, code, tail(r.proc.Log(), 8))
		}
		c.mu.Lock()
		c.exited[r.proc.Pid()] = time.Now().UnixNano()
		c.mu.Unlock()
	}
	until := time.Now().Add(time.Duration(4+n.rnd.IntN(3)) * time.Second)
	if n.layout2 {
		n.migrateLayout()
	}
	sleepUntil(until) // the outage's length, not a wait for a condition
	for _, r := range c.reps {
		c.start(r)
	}
	c.blackout(from, time.Now().Add(2*time.Second))
	n.say("outage: every replica stopped from %s, started again", from.Format(timeMs))
}

// duplicate starts a process with a live replica's id: it must be refused.
// The refusal reads the live one's announcement, so the copy starts once
// the store answers with it: a Redis that does not answer is no reason to
// refuse (app.ClaimReplicaID; the scheduler warns of the two later). After
// the nemesis emptied a Cluster master (CLUSTERDOWN for a while, the
// announcement gone with the master's keys), a copy of r2 started beside
// it and ran.
func (n *nemesis) duplicate() {
	n.allUp()
	r := n.c.reps[n.rnd.IntN(len(n.c.reps))]
	n.announced(r.name)
	p := tickdtest.Start(n.c.t, r.name+"-copy", r.env, "-config", r.cfg)
	if code := p.Wait(30 * time.Second); code != 1 || !strings.Contains(p.Log(), "is in use by a live tickd") {
		failf(n.c.t, "a second process with %s's replica id: exit %d, want refused; its log ends:\n%s", r.name, code, tail(p.Log(), 8))
	}
	n.say("a second process with %s's id: refused", r.name)
}

// announced waits until tickd status reads name's announcement, seen
// within the last 2s.
func (n *nemesis) announced(name string) {
	cfg := filepath.Join(n.dir, "operator.toml")
	tickdtest.WriteFile(n.c.t, cfg, n.config())
	expect.WaitFor(n.c.t, 30*time.Second, name+"'s announcement read back", func() bool {
		out, err := exec.Command(n.bin, "status", "-config", cfg, "-json").Output()
		var doc tickdtype.StatusDoc
		if err != nil || json.Unmarshal(out, &doc) != nil {
			return false
		}
		return slices.ContainsFunc(doc.Replicas, func(r tickdtype.ReplicaDoc) bool {
			return r.ID == name && time.Since(r.LastSeen.Time()) < 2*time.Second
		})
	})
}

func (n *nemesis) redisRestart() {
	at := time.Now()
	if rc := n.c.rc; rc != nil {
		ms := rc.Masters(n.c.t)
		ms[n.rnd.IntN(len(ms))].Restart() // its keys gone: its shards' leases, counts, pauses
	} else {
		n.c.srv.Restart() // every key gone: leases, counts, pauses
	}
	n.c.dataLost(at)
	n.paused = false
	n.say("redis restarted empty")
}

// redisRollback takes a snapshot of the Redis (on a Cluster, of one master)
// when it holds none, else kills that server and restarts it from it.
func (n *nemesis) redisRollback() {
	if n.snapped == nil {
		n.snapped = n.c.srv
		if rc := n.c.rc; rc != nil {
			ms := rc.Masters(n.c.t)
			n.snapped = ms[n.rnd.IntN(len(ms))]
		}
		n.snap, n.snapAt = n.snapped.Snapshot(), time.Now()
		n.say("redis snapshot taken of %s", n.snapped.Addr)
		return
	}
	at := time.Now()
	n.snapped.RestartFrom(n.snap)
	n.c.dataLost(at)
	n.say("redis %s restarted from its snapshot of %v before", n.snapped.Addr, at.Sub(n.snapAt).Round(time.Millisecond))
	n.snapped = nil
}

// TestOperatorChaos runs the nemesis on a single Redis and on a 3-master
// Redis Cluster, each for TICKD_NEMESIS_TIME (20s) with the seed
// TICKD_NEMESIS_SEED (else a new one, logged), judged as every fault
// scenario: no overlap but the documented one of an unlock -force, no tick
// run twice, fences increasing, liveness >= 0.99 of the eligible pairs, no
// lease left, tick records that match the runs. TICKD_NEMESIS_ON=redis or
// cluster runs one of them.
func TestOperatorChaos(t *testing.T) {
	t.Parallel() // each scenario on a Redis and replicas of its own
	for _, on := range []string{"redis", "cluster"} {
		if o := os.Getenv("TICKD_NEMESIS_ON"); o != "" && o != on {
			continue
		}
		t.Run(on, func(t *testing.T) { operatorChaos(t, on == "cluster") })
	}
}

func operatorChaos(t *testing.T, onCluster bool) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TICKD_NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			expect.Fatalf(t, "TICKD_NEMESIS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	chaos := 20 * time.Second
	if s := os.Getenv("TICKD_NEMESIS_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			expect.Fatalf(t, "TICKD_NEMESIS_TIME=%q: %v", s, err)
		}
		chaos = d
	}
	t.Logf("nemesis seed %d (replay: TICKD_NEMESIS_SEED=%d)", seed, seed)
	n := newNemesis(t, seed, onCluster)
	r := n.c.run(func(c *cluster, _ time.Time) {
		// The first act is an outage of the whole fleet, so that every seed
		// judges a catch-up of the ticks it missed (catch_up_runs = "all"),
		// and a backfill.
		sleepUntil(time.Now().Add(2 * time.Second)) // a tick or so first: the operator's pace
		n.outage()
		// Then, once the ticks it missed are older than a live tick can
		// start, a backfill of them and of those before: every seed judges
		// one (the act does more, at random), beside the chaos that
		// follows.
		sleepUntil(time.Now().Add(11 * time.Second)) // the ticks' age, not a wait for a condition
		n.backfill()
		end := time.Now().Add(chaos)
		for time.Now().Before(end) {
			sleepUntil(time.Now().Add(time.Second + time.Duration(n.rnd.Int64N(int64(2*time.Second)))))
			n.act(end)
		}
		for deadline := time.Now().Add(20 * time.Second); n.paused && time.Now().Before(deadline); {
			if _, err := n.cli("resume", "sync"); err == nil {
				n.paused = false
				c.blackout(time.Now().Add(-time.Second), time.Now().Add(time.Second))
			}
		}
	})
	spans, wrong := n.checkTraces()
	// replaced: runs that replaced a holder (on_busy = "replace"); queued:
	// the extra tasks' follow-ups (queue_max buffers them).
	zonedRuns, replaced, queued, caughtUp, backfilled := 0, 0, 0, 0, 0
	for _, run := range tickdtest.ReadRuns(t, n.c.runsLog) {
		switch {
		case run.Start.Task == "zoned":
			zonedRuns++
		case run.Start.Reason == "replaced":
			replaced++
		case run.Start.Reason == "catch_up":
			caughtUp++
		case run.Start.Reason == "backfill":
			backfilled++
		case run.Start.Reason == "queued" && strings.HasPrefix(run.Start.Task, "extra-"):
			queued++
		}
	}
	r.extra = fmt.Sprintf("seed=%d excused_overlaps=%d spans=%d traces_wrong=%d zoned_runs=%d replaced_runs=%d queued_runs=%d catch_up_runs=%d backfill_runs=%d", seed, r.Excused, spans, len(wrong), zonedRuns, replaced, queued, caughtUp, backfilled)
	report(t, map[bool]string{false: "operator chaos", true: "operator chaos cluster"}[onCluster], r)
	t.Logf("what the nemesis did:\n%s", strings.Join(n.log, "\n"))
	guaranteesHold(t, r, false)
	if zonedRuns == 0 {
		failf(t, "the zoned task never ran: the checker judged nothing of it")
	}
	if spans == 0 || len(wrong) > 0 {
		failf(t, "traces: %d spans received, %d wrong:\n%s", spans, len(wrong), strings.Join(wrong[:min(len(wrong), 20)], "\n"))
	}
}

// checkTraces judges the spans the replicas sent: each fan-out span of
// sync in its tick's derived trace, each tick run's span a child of a
// fan-out span of that trace (when that span was received: a replica
// killed -9 sends none), or, past run_spans, a root linked to one.
func (n *nemesis) checkTraces() (spans int, wrong []string) {
	got, err := n.traces.Spans()
	if err != nil {
		return 0, []string{err.Error()}
	}
	fanOuts := map[string]string{} // span id -> trace id
	for _, sp := range got {
		if sp.Name != "tick sync" {
			continue
		}
		T, err := time.Parse(time.RFC3339Nano, sp.Attrs["tickd.tick"])
		if want := telemetry.TickTrace("sync", T).String(); err != nil || sp.TraceID != want {
			wrong = append(wrong, fmt.Sprintf("fan-out span %s of tick %q in trace %s, want %s", sp.SpanID, sp.Attrs["tickd.tick"], sp.TraceID, want))
		}
		fanOuts[sp.SpanID] = sp.TraceID
	}
	for _, sp := range got {
		if sp.Name != "run sync" || sp.Attrs["tickd.reason"] != "tick" {
			continue
		}
		if sp.Parent == "" { // past run_spans: a root linked to its fan-out
			if len(sp.Links) != 1 || (fanOuts[sp.Links[0].SpanID] != "" && fanOuts[sp.Links[0].SpanID] != sp.Links[0].TraceID) {
				wrong = append(wrong, fmt.Sprintf("run span %s: a root with links %+v, want one to its fan-out", sp.SpanID, sp.Links))
			}
			continue
		}
		if tr, ok := fanOuts[sp.Parent]; ok && tr != sp.TraceID {
			wrong = append(wrong, fmt.Sprintf("run span %s in trace %s, its fan-out's is %s", sp.SpanID, sp.TraceID, tr))
		}
	}
	return len(got), wrong
}
