// Package e2ebench measures tickd's own path end to end, against the peer a
// user would write by hand, in the same run (docs/performance.md): a tick
// fanned out over N entities, each run started, finished and released.
//
//	go test -run XXX -bench 'Tick$' -benchtime 1x ./cmd/tickd/internal/e2ebench
//	go test -run XXX -bench TickAllBusy -benchtime 1x ./cmd/tickd/internal/e2ebench
//	go test -run XXX -bench Replicas -benchtime 1x ./cmd/tickd/internal/e2ebench
//	go test -run XXX -bench ClusterTick -benchtime 1x -timeout 60m ./cmd/tickd/internal/e2ebench
//
// E2E_ENTITIES (100000; Replicas: 20000), E2E_REPLICAS (1; Replicas: 3),
// E2E_TICKS (3 measured ticks, after a first one that is not), E2E_EVERY
// (seconds; Tick: 20, each side having half of it, Replicas: 10) and
// E2E_LOG_LEVEL (info) tune it; E2E_PEER=0 leaves the peer out (for
// profiling tickd alone), and E2E_GCPOLICY=0 runs tickd under Go's default
// GC instead of the daemon's.
package e2ebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/cmd/tickd/internal/otlp"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/gcpolicy"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/tasks"
)

// concurrency is how many runs each side has in flight: the peer's 512
// goroutines, tickd's task concurrency.
const concurrency = 512

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// side is what one side measured over the measured ticks.
type side struct {
	durations []time.Duration // per tick: from T until the last run ended
	runs      int
	redisUS   float64 // Redis main-thread CPU, µs
	// tickRedisUS is the part of redisUS from the side's half's start to
	// its tick's end (interleaved only): the ticks' own, without the idle
	// time after them.
	tickRedisUS float64
	ownUS       float64            // the side's process's CPU (user and system), µs
	allocs      uint64             // tickd: heap allocations in its process (the benchmark's bookkeeping too)
	commands    int64              // Redis commands (INFO commandstats)
	byCommand   map[string]cmdStat // the same, by command
	dup, lost   int                // entities run twice, or not at all, in a tick
	byReplica   map[string]int     // tickd: runs per replica, over the measured ticks
	byNode      []float64          // Redis CPU by node sampled (a Cluster's masters), µs
}

// busiest is the busiest node's share of the Redis CPU.
func (s side) busiest() float64 {
	var most, total float64
	for _, us := range s.byNode {
		most, total = max(most, us), total+us
	}
	return most / total
}

func (s side) median() time.Duration {
	d := append([]time.Duration(nil), s.durations...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func (s side) String() string {
	out := fmt.Sprintf("tick %v (ticks %v), Redis CPU %.1f µs/run, %.2f commands/run, dup %d, lost %d, own CPU %.1f µs/run",
		s.median().Round(time.Millisecond), s.durations, s.redisUS/float64(s.runs), float64(s.commands)/float64(s.runs),
		s.dup, s.lost, s.ownUS/float64(s.runs))
	if s.allocs > 0 {
		out += fmt.Sprintf(", %.1f allocations/run", float64(s.allocs)/float64(s.runs))
	}
	if len(s.byReplica) > 1 {
		out += fmt.Sprintf(", runs per replica %v", s.byReplica)
	}
	return out + "; by command:" + perRun(s.byCommand, s.runs)
}

// setup starts the throwaway redis-server and reads the settings shared by
// the benchmarks: the entities (E2E_ENTITIES, else entities of them), the
// measured ticks and the schedule (E2E_EVERY seconds, else every).
func setup(b *testing.B, entities int, every time.Duration) (srv *redistest.Server, ids []string, ticks int, _ time.Duration) {
	return redistest.Start(b), entityIDs(envInt("E2E_ENTITIES", entities)), envInt("E2E_TICKS", 3), time.Duration(envInt("E2E_EVERY", int(every/time.Second))) * time.Second
}

// entityIDs is the benchmark's n entities: "0" to n-1, which the
// observers index by.
func entityIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}

// BenchmarkTick runs tickd (the scheduler as a library, a no-op Go
// handler) and the hand-written peer over the same entities on one
// throwaway redis-server, interleaved (tickd ticks at T, the peer at T +
// every/2), and reports both and their ratios. E2E_PEER=0 runs tickd
// alone.
func BenchmarkTick(b *testing.B) {
	replicas := envInt("E2E_REPLICAS", 1)
	srv, ids, ticks, every := setup(b, 100000, 20*time.Second)
	for range b.N {
		var t, p side
		if os.Getenv("E2E_PEER") == "0" {
			t = runTickd(b, single(srv.Addr), ids, replicas, ticks, every)
		} else {
			t, p = interleaved(b, single(srv.Addr), ids, replicas, ticks, every)
		}
		report(b, replicas, t, p)
	}
}

// report logs both sides and reports their figures and ratios, failing a
// side whose entities did not each run once a tick (found busy once, in
// BenchmarkTickAllBusy).
func report(b *testing.B, replicas int, t, p side) {
	b.Logf("tickd, %d replica(s): %v", replicas, t)
	b.ReportMetric(t.median().Seconds(), "tickd-s/tick")
	b.ReportMetric(t.redisUS/float64(t.runs), "tickd-redis-µs/run")
	b.ReportMetric(t.ownUS/float64(t.runs), "tickd-cpu-µs/run")
	b.ReportMetric(float64(t.allocs)/float64(t.runs), "tickd-allocs/run")
	b.ReportMetric(float64(t.commands)/float64(t.runs), "tickd-cmds/run")
	if t.dup+t.lost > 0 {
		b.Errorf("runs not exactly once per tick: tickd %+v", t)
	}
	if t.tickRedisUS > 0 {
		b.ReportMetric(t.tickRedisUS/float64(t.runs), "tickd-tick-redis-µs/run")
	}
	if p.runs == 0 {
		return
	}
	if p.tickRedisUS > 0 {
		b.ReportMetric(p.tickRedisUS/float64(p.runs), "peer-tick-redis-µs/run")
	}
	b.Logf("peer (bsm/redislock, %d at once): %v", concurrency, p)
	b.ReportMetric(p.median().Seconds(), "peer-s/tick")
	b.ReportMetric(p.median().Seconds()/t.median().Seconds(), "speedup")
	b.ReportMetric(p.redisUS/float64(p.runs), "peer-redis-µs/run")
	b.ReportMetric((p.redisUS/float64(p.runs))/(t.redisUS/float64(t.runs)), "redis-cpu-ratio")
	b.ReportMetric(float64(p.commands)/float64(p.runs), "peer-cmds/run")
	if p.dup+p.lost > 0 {
		b.Errorf("runs not exactly once per tick: peer %+v", p)
	}
}

// BenchmarkReplicas measures what several replicas cost Redis against one
// (docs/performance.md, "Targets": several replicas must not multiply the Redis
// work per run): tickd with 1 replica, then with E2E_REPLICAS (3), over the same
// entities (E2E_ENTITIES, 20000) on one redis-server, in each round (one
// per -count), and reports both and their ratio. Each entity must run
// exactly once per tick, and each replica must run at least half its
// share.
func BenchmarkReplicas(b *testing.B) {
	replicas := envInt("E2E_REPLICAS", 3)
	srv, ids, ticks, every := setup(b, 20000, 10*time.Second)
	for range b.N {
		one := runTickd(b, single(srv.Addr), ids, 1, ticks, every)
		b.Logf("tickd, 1 replica: %v", one)
		many := runTickd(b, single(srv.Addr), ids, replicas, ticks, every)
		b.Logf("tickd, %d replicas: %v", replicas, many)
		perRun := func(s side) float64 { return s.redisUS / float64(s.runs) }
		b.ReportMetric(perRun(one), "one-redis-µs/run")
		b.ReportMetric(perRun(many), "many-redis-µs/run")
		b.ReportMetric(perRun(many)/perRun(one), "redis-cpu-ratio")
		calls := func(s side) float64 { return float64(s.commands) / float64(s.runs) }
		b.ReportMetric(calls(many)/calls(one), "cmds-ratio")
		for _, s := range []side{one, many} {
			if s.dup+s.lost > 0 {
				b.Errorf("runs not exactly once per tick: %+v", s)
			}
		}
		for r, got := range many.byReplica {
			if got*2*replicas < many.runs {
				b.Errorf("replica %s ran %d of %d runs: less than half its share", r, got, many.runs)
			}
		}
		if len(many.byReplica) < replicas {
			b.Errorf("only %d of %d replicas ran: %v", len(many.byReplica), replicas, many.byReplica)
		}
	}
}

// tickRecord counts a tick's runs per entity and its last end.
type tickRecord struct {
	mu        sync.Mutex
	seen      []uint8
	runs      int
	lastEnd   time.Time
	byReplica map[string]int
	fanOuts   int // the replicas' fan-outs of the tick ended (BenchmarkTickAllBusy)
	// all is closed once the tick's runs are all in: the benchmark waits
	// on it, not by polling, whose wake-ups in this process were counted
	// to tickd's CPU (about 200 a second between ticks).
	all chan struct{}
}

// tickd is replicas schedulers (each its own store and client) over ids,
// started, and what they ran by tick.
type tickd struct {
	ids     []string
	first   time.Time // the first tick after start, not measured
	mu      sync.Mutex
	byTick  map[int64]*tickRecord // by tick, Unix ns
	scheds  []*scheduler.Scheduler
	stores  []*lease.Store
	clients []redis.UniversalClient
	restore func() // the garbage collector policy before
	// busy: every entity is busy at each tick (BenchmarkTickAllBusy): a tick
	// is done when its fan-out ends, and counts its busy entities as runs.
	busy bool
}

// target is the Redis the schedulers use and the benchmark samples: one
// server, or a Cluster, sampled on each master.
type target struct {
	nodes     []string                     // sampled
	newClient func() redis.UniversalClient // one scheduler's
	shards    int                          // the task's (1 unless set)
	busy      bool                         // every entity held by another at each tick (BenchmarkTickAllBusy)
}

// single is the one server at addr, its task in E2E_SHARDS shards (1).
func single(addr string) target {
	return target{nodes: []string{addr}, newClient: func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	}, shards: envInt("E2E_SHARDS", 1)}
}

// startTickd starts replicas schedulers over ids on the schedule every,
// each with its own store and client on tgt.
func startTickd(b *testing.B, tgt target, ids []string, replicas int, every time.Duration) *tickd {
	td := &tickd{ids: ids, byTick: map[int64]*tickRecord{}, restore: func() {}, busy: tgt.busy}
	// The daemon's garbage collector policy, which tickd run sets (docs/operations.md,
	// "Memory and the garbage collector"); E2E_GCPOLICY=0 leaves Go's default, which a program
	// embedding the scheduler has unless it chooses otherwise.
	if os.Getenv("E2E_GCPOLICY") != "0" {
		var p gcpolicy.Policy
		p.Start(context.Background())                        //nolint:errcheck // nil
		td.restore = func() { p.Stop(context.Background()) } //nolint:errcheck // nil

	}
	reg := &tasks.Registry{}
	reg.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil })
	t := config.DefaultTask()
	t.Name, t.Every, t.Handler, t.LeaseTTL, t.Concurrency, t.Entities = "bench", every, "noop", 5*time.Second, concurrency, ids
	t.Shards = max(tgt.shards, 1)
	// E2E_LIMIT=1: the task runs under a limit that never binds (a
	// concurrency and a rate far above what a tick asks), for what a limit
	// costs (docs/performance.md, "Limits").
	limited := os.Getenv("E2E_LIMIT") == "1"
	if limited {
		t.Limits = []string{"bench-api"}
	}
	cfg, err := config.New(config.DefaultDaemon(), nil, t)
	if err != nil {
		b.Fatal(err)
	}
	if limited {
		cfg.Limits = []config.Limit{{Name: "bench-api", Concurrency: 1_000_000, Rate: "1000000/s", RateN: 1_000_000, RatePer: time.Second,
			Burst: 100_000, Per: "all", MaxBackoff: 10 * time.Minute}}
	}
	// The daemon's JSON lines (its handler), written nowhere: at info (the
	// default) a run writes one; E2E_LOG_LEVEL=warn leaves them out.
	var level slog.Level
	level.UnmarshalText([]byte(os.Getenv("E2E_LOG_LEVEL"))) //nolint:errcheck // "" is info
	quiet := slog.New(logs.NewJSON(io.Discard, level))
	tracer := benchTracer(b, os.Getenv("E2E_TRACE"))
	for i := range replicas {
		c := tgt.newClient()
		td.clients = append(td.clients, c)
		st, err := stores.Redis(c, "e2e", lease.Options{Replica: "r" + strconv.Itoa(i), MaxTTL: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		td.stores = append(td.stores, st)
		if i == 0 {
			st.InitEpoch(context.Background()) //nolint:errcheck
		}
		s, err := scheduler.New(cfg, scheduler.Options{Store: st, Logger: quiet, Registry: reg, Observer: td.observe, Tracer: tracer})
		if err != nil {
			b.Fatal(err)
		}
		td.scheds = append(td.scheds, s)
	}
	td.first = time.Now().Truncate(every).Add(every)
	for _, s := range td.scheds {
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return td
}

// observe counts each ended run under its tick.
func (td *tickd) observe(ev scheduler.Event) {
	if td.busy && ev.Kind == scheduler.EventTick {
		td.fannedOutBusy(ev)
		return
	}
	if ev.Kind != scheduler.EventRunEnded {
		return
	}
	r := td.tick(ev.Tick)
	i, _ := strconv.Atoi(ev.Entity)
	r.mu.Lock()
	r.seen[i]++
	r.runs++
	r.byReplica[ev.Replica]++
	// The clock is read once the tick's runs are all in (wait): by the run
	// that completes them and any after it, the last end either way, and
	// not a read per run counted to tickd's CPU.
	if r.runs >= len(td.ids) {
		r.lastEnd = time.Now()
		if r.runs == len(td.ids) {
			close(r.all)
		}
	}
	r.mu.Unlock()
}

// tick is tick T's record, made if no run of it ended yet.
func (td *tickd) tick(T time.Time) *tickRecord {
	td.mu.Lock()
	defer td.mu.Unlock()
	r := td.byTick[T.UnixNano()]
	if r == nil {
		r = &tickRecord{seen: make([]uint8, len(td.ids)), byReplica: map[string]int{}, all: make(chan struct{})}
		td.byTick[T.UnixNano()] = r
	}
	return r
}

// wait waits until every entity has run for tick T, failing a minute past
// deadline with the runs per tick so far.
func (td *tickd) wait(b *testing.B, T, deadline time.Time) {
	late := time.NewTimer(time.Until(deadline.Add(time.Minute)))
	defer late.Stop()
	select {
	case <-td.tick(T).all:
		return
	case <-late.C:
	}
	td.mu.Lock()
	defer td.mu.Unlock()
	out := ""
	for k, v := range td.byTick {
		v.mu.Lock()
		out += fmt.Sprintf(" %v:%d", time.Unix(0, k).UTC(), v.runs)
		v.mu.Unlock()
	}
	b.Fatal("tick not done a minute after the next one; runs per tick:" + out)
}

// stop shuts the schedulers down and puts the garbage collector policy
// back.
func (td *tickd) stop() {
	for _, s := range td.scheds {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.Stop(ctx) //nolint:errcheck // nil
		cancel()
	}
	for _, st := range td.stores {
		st.Stop(context.Background())
	}
	for _, c := range td.clients {
		c.Close()
	}
	td.restore()
}

// count adds tick T (done) to out: its time from T until its last run
// ended, its runs by replica, and its entities run twice or not at all.
func (td *tickd) count(T time.Time, out *side) {
	r := td.tick(T)
	r.mu.Lock()
	defer r.mu.Unlock()
	out.durations = append(out.durations, r.lastEnd.Sub(T))
	out.runs += r.runs
	for rep, n := range r.byReplica {
		out.byReplica[rep] += n
	}
	if td.busy {
		out.lost += len(td.ids) - r.runs // not found busy
		return
	}
	for _, n := range r.seen {
		if n == 0 {
			out.lost++
		} else if n > 1 {
			out.dup += int(n) - 1
		}
	}
}

// runTickd runs tickd until ticks+1 ticks are done, and measures the last
// ticks and the idle time between them.
func runTickd(b *testing.B, tgt target, ids []string, replicas, ticks int, every time.Duration) side {
	td := startTickd(b, tgt, ids, replicas, every)
	// The first tick after start is not measured: measurement starts right
	// after it ended.
	td.wait(b, td.first, td.first.Add(every))
	s0 := takeSample(b, tgt.nodes)
	for k := 1; k <= ticks; k++ {
		T := td.first.Add(time.Duration(k) * every)
		td.wait(b, T, T.Add(every))
	}
	s1 := takeSample(b, tgt.nodes)
	td.stop()
	out := side{byReplica: map[string]int{}, byCommand: map[string]cmdStat{}}
	out.add(s0, s1)
	out.ownUS, out.allocs = s1.ownUS-s0.ownUS, s1.mallocs-s0.mallocs
	for k := 1; k <= ticks; k++ {
		td.count(td.first.Add(time.Duration(k)*every), &out)
	}
	return out
}

// interleaved runs tickd and the peer in one round, on offset schedules:
// tickd ticks at T, the peer at T + every/2, so that both sides see the
// same minutes of this machine. The peer runs in a process of its own, as
// a user's would (this test binary again, under Go's default garbage
// collector), so that neither side's heap or goroutines weigh on the
// other's. Each side is measured over its own half of each period, from
// lead before its tick to lead before the other side's: its tick and the
// idle time after it. A tick that runs into the other side's half fails
// the round.
func interleaved(b *testing.B, tgt target, ids []string, replicas, ticks int, every time.Duration) (t, p side) {
	addr := tgt.nodes[0]
	const lead = 500 * time.Millisecond
	half := every / 2
	pr := startPeer(b, addr, len(ids))
	defer pr.stop()
	td := startTickd(b, tgt, ids, replicas, every)
	defer td.stop()
	t = side{byReplica: map[string]int{}, byCommand: map[string]cmdStat{}}
	p = side{byCommand: map[string]cmdStat{}}
	sleepUntil(td.first.Add(-lead))
	s0 := takeSample(b, []string{addr})
	var peerCPU float64           // the peer's process's CPU at its last tick's end, µs
	for k := 0; k <= ticks; k++ { // tick 0, the first after start, is not measured
		T := td.first.Add(time.Duration(k) * every)
		td.wait(b, T, T.Add(every))
		tEnd := takeSample(b, []string{addr}) // tickd's tick ended
		if end := td.tick(T).lastEnd; !end.Before(T.Add(half - lead)) {
			b.Fatalf("tickd's tick %v took %v, into the peer's half of the period: raise E2E_EVERY", T, end.Sub(T))
		}
		sleepUntil(T.Add(half - lead))
		s1 := takeSample(b, []string{addr})
		r := pr.tick(b, T.Add(half))
		pEnd := takeSample(b, []string{addr}) // the peer's tick ended
		if time.Now().After(T.Add(every - lead)) {
			b.Fatalf("the peer's tick %v took %v, into tickd's half of the period: raise E2E_EVERY", T.Add(half), r.took)
		}
		sleepUntil(T.Add(every - lead))
		s2 := takeSample(b, []string{addr})
		if k > 0 {
			t.tickRedisUS += tEnd.redisUS - s0.redisUS
			p.tickRedisUS += pEnd.redisUS - s1.redisUS
			t.add(s0, s1)
			t.ownUS += s1.ownUS - s0.ownUS
			t.allocs += s1.mallocs - s0.mallocs
			td.count(T, &t)
			p.add(s1, s2)
			p.ownUS += r.cpuUS - peerCPU
			p.durations = append(p.durations, r.took)
			ran, lost := r.runs, r.lost
			if tgt.busy { // each entity found busy counts, one that ran is wrong
				ran, lost = r.lost, r.runs
			}
			p.runs += ran
			p.lost += lost
		}
		s0, peerCPU = s2, r.cpuUS
	}
	return t, p
}

// sleepUntil sleeps until t: a tick, or the start of a side's half of a
// period.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestMain runs the peer's process when the benchmark starts this test
// binary as one (E2E_PEER_ADDR set), and the tests and benchmarks
// otherwise.
func TestMain(m *testing.M) {
	if name := os.Getenv("BF_REPLICA"); name != "" { // a replica of BenchmarkBackfill
		if err := serveBFReplica(name); err != nil {
			fmt.Fprintln(os.Stderr, "replica:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if addr := os.Getenv("E2E_PEER_ADDR"); addr != "" {
		if err := servePeer(addr, envInt("E2E_PEER_ENTITIES", 1), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// peerTick is what the peer's process says of one tick.
type peerTick struct {
	took  time.Duration // from T until the last run ended
	runs  int
	lost  int     // entities not run
	cpuUS float64 // the process's CPU (user and system) so far, µs
}

// servePeer is the peer's process, over n entities: for each tick T (Unix
// ns) read from in, it runs the tick when it comes and writes its peerTick
// to out, a line of four numbers.
func servePeer(addr string, n int, in io.Reader, out io.Writer) error {
	ids := entityIDs(n)
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: concurrency})
	defer c.Close()
	locker := redislock.New(c)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		ns, err := strconv.ParseInt(lines.Text(), 10, 64)
		if err != nil {
			return err
		}
		r := peerRun(locker, ids, time.Unix(0, ns))
		if _, err := fmt.Fprintf(out, "%d %d %d %f\n", r.took, r.runs, r.lost, processCPU()); err != nil {
			return err
		}
	}
	return lines.Err()
}

// peerRun is the peer's tick T, what a user writes from the articles: a
// timer on the schedule and, for each entity, one redislock Obtain, the
// no-op and a Release, concurrency at once.
func peerRun(locker *redislock.Client, ids []string, T time.Time) peerTick {
	sleepUntil(T)
	seen := make([]uint8, len(ids))
	var last atomic.Int64
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() { last.Store(time.Now().UnixNano()) }()
			l, err := locker.Obtain(context.Background(), "peer:"+id, 5*time.Second, nil)
			if err != nil {
				return // held (busy) or failed: skipped this tick
			}
			seen[i]++                       // the no-op
			l.Release(context.Background()) //nolint:errcheck
		}()
	}
	wg.Wait()
	r := peerTick{took: time.Unix(0, last.Load()).Sub(T)}
	for _, n := range seen {
		r.runs += int(n)
		if n == 0 {
			r.lost++
		}
	}
	return r
}

// peerProcess is the peer's process, started.
type peerProcess struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

// startPeer starts the peer's process over entities entities on addr.
func startPeer(b *testing.B, addr string, entities int) *peerProcess {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "E2E_PEER_ADDR="+addr, "E2E_PEER_ENTITIES="+strconv.Itoa(entities))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return &peerProcess{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
}

// tick has the peer's process run tick T, and waits for its answer.
func (pp *peerProcess) tick(b *testing.B, T time.Time) peerTick {
	if _, err := fmt.Fprintln(pp.in, T.UnixNano()); err != nil {
		b.Fatal(err)
	}
	if !pp.lines.Scan() {
		b.Fatalf("the peer's process ended: %v", pp.lines.Err())
	}
	var r peerTick
	var took int64
	if _, err := fmt.Sscan(pp.lines.Text(), &took, &r.runs, &r.lost, &r.cpuUS); err != nil {
		b.Fatalf("the peer's process said %q: %v", pp.lines.Text(), err)
	}
	r.took = time.Duration(took)
	return r
}

// stop ends the peer's process: it returns when its input is closed.
func (pp *peerProcess) stop() {
	pp.in.Close()
	pp.cmd.Wait() //nolint:errcheck // its failure was reported on stderr
}

// sample is what Redis and this process had spent at one moment.
type sample struct {
	redisUS float64   // Redis main-thread CPU, µs
	byNode  []float64 // the same, node by node
	ownUS   float64   // this process's CPU, µs
	mallocs uint64    // this process's heap allocations so far
	cmds    int64
	by      map[string]cmdStat
}

// add adds what Redis spent from s0 to s1 to s.
func (s *side) add(s0, s1 sample) {
	s.redisUS += s1.redisUS - s0.redisUS
	if s.byNode == nil {
		s.byNode = make([]float64, len(s1.byNode))
	}
	for i := range s1.byNode {
		s.byNode[i] += s1.byNode[i] - s0.byNode[i]
	}
	s.commands += s1.cmds - s0.cmds
	for k, v := range s1.by {
		c := s.byCommand[k]
		c.calls += v.calls - s0.by[k].calls
		c.usec += v.usec - s0.by[k].usec
		s.byCommand[k] = c
	}
}

// waitUntil polls cond until it holds, failing with what state says when
// deadline has passed by a minute.
func waitUntil(b *testing.B, deadline time.Time, cond func() bool, state func() string) {
	if !expect.Within(time.Until(deadline.Add(time.Minute)), cond) {
		b.Fatal("tick not done a minute after the next one; runs per tick:" + state())
	}
}

// cmdStat is one command's line of INFO commandstats: calls, and the µs
// spent executing them (for a script, the script's run).
type cmdStat struct {
	calls int64
	usec  float64
}

// perRun says, for each command that ran, its calls and µs per run.
func perRun(by map[string]cmdStat, runs int) string {
	var names []string
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	out := ""
	for _, k := range names {
		if c := by[k]; c.calls > 0 {
			out += fmt.Sprintf(" %s %.4f calls %.2f µs;", k, float64(c.calls)/float64(runs), c.usec/float64(runs))
		}
	}
	return out
}

// processCPU is this process's CPU time so far (user and system), µs. In
// the benchmark's process, it is the schedulers' and the little the
// benchmark's observer adds.
func processCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // cannot fail for RUSAGE_SELF
	return float64(ru.Utime.Sec+ru.Stime.Sec)*1e6 + float64(ru.Utime.Usec+ru.Stime.Usec)
}

// takeSample reads the main-thread CPU and the commands run (INFO cpu and
// commandstats) of each node at nodes, summed and by command, and this
// process's CPU.
func takeSample(b *testing.B, nodes []string) sample {
	s := sample{by: map[string]cmdStat{}}
	for _, addr := range nodes {
		us := readNode(b, addr, &s)
		s.redisUS += us
		s.byNode = append(s.byNode, us)
	}
	s.ownUS = processCPU()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mallocs = ms.Mallocs
	return s
}

// readNode adds the commands the node at addr ran to s, and returns its
// main-thread CPU, µs.
func readNode(b *testing.B, addr string, s *sample) (cpuUS float64) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case k == "used_cpu_sys_main_thread" || k == "used_cpu_user_main_thread":
			f, _ := strconv.ParseFloat(v, 64)
			cpuUS += f * 1e6
		case strings.HasPrefix(k, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			s.cmds += n
			var usec float64
			if _, u, ok := strings.Cut(v, "usec="); ok {
				u, _, _ = strings.Cut(u, ",")
				usec, _ = strconv.ParseFloat(u, 64)
			}
			name := strings.TrimPrefix(k, "cmdstat_")
			c := s.by[name]
			s.by[name] = cmdStat{c.calls + n, c.usec + usec}
		}
	}
	return cpuUS
}

// benchTracer is the tracer E2E_TRACE asks for: "" none (tickd's default:
// nothing configured); "sampled-out", tracing on with a sampler that keeps
// nothing; "full", every span kept and exported over OTLP/HTTP to a
// receiver that reads and drops them (its CPU is the benchmark process's
// too, and small: it decodes nothing).
func benchTracer(b *testing.B, mode string) *telemetry.Tracer {
	sampler := map[string]string{"": "", "sampled-out": "always_off", "full": "always_on"}[mode]
	if mode == "" || sampler == "" {
		if mode != "" {
			b.Fatalf("E2E_TRACE=%q: want sampled-out or full", mode)
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // dropped
	}))
	b.Cleanup(srv.Close)
	b.Setenv("OTEL_TRACES_SAMPLER", sampler) // the SDK reads it
	tr, err := otlp.New(context.Background(), &config.Telemetry{Endpoint: srv.URL}, os.Getenv, "bench", "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Stop(context.Background()) }) //nolint:errcheck // the spans are dropped
	return tr
}
