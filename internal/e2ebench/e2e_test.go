// Package e2ebench measures tickd's own path end to end, against the peer a
// user would write by hand, in the same run (README, "Speed"): a tick
// fanned out over N entities, each run started, finished and released.
//
//	go test -run XXX -bench 'Tick$' -benchtime 1x ./internal/e2ebench
//	go test -run XXX -bench Replicas -benchtime 1x ./internal/e2ebench
//
// E2E_ENTITIES (100000; Replicas: 20000), E2E_REPLICAS (1; Replicas: 3), E2E_TICKS (3 measured ticks, after
// a first one that is not), E2E_EVERY (10s) and E2E_LOG_LEVEL (info) tune
// it; E2E_PEER=0 leaves the peer out (for profiling tickd alone), and
// E2E_GCPOLICY=0 runs tickd under Go's default GC instead of the daemon's.
package e2ebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
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

	"github.com/tickd/tickd/internal/gcpolicy"
	"github.com/tickd/tickd/internal/redistest"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
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
	redisUS   float64        // Redis main-thread CPU, µs
	ownUS     float64        // tickd: this process's CPU (user and system), µs
	commands  int64          // Redis commands (INFO commandstats)
	dup, lost int            // entities run twice, or not at all, in a tick
	byReplica map[string]int // tickd: runs per replica, over the measured ticks
}

func (s side) median() time.Duration {
	d := append([]time.Duration(nil), s.durations...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func (s side) String() string {
	out := fmt.Sprintf("tick %v (ticks %v), Redis CPU %.1f µs/run, %.2f commands/run, dup %d, lost %d",
		s.median().Round(time.Millisecond), s.durations, s.redisUS/float64(s.runs), float64(s.commands)/float64(s.runs), s.dup, s.lost)
	if s.ownUS > 0 {
		out += fmt.Sprintf(", tickd's own CPU %.1f µs/run", s.ownUS/float64(s.runs))
	}
	if len(s.byReplica) > 1 {
		out += fmt.Sprintf(", runs per replica %v", s.byReplica)
	}
	return out
}

// setup starts the throwaway redis-server and reads the settings shared by
// the benchmarks: the entities (E2E_ENTITIES, else entities of them), the
// measured ticks and the schedule.
func setup(b *testing.B, entities int) (srv *redistest.Server, ids []string, ticks int, every time.Duration) {
	ids = make([]string, envInt("E2E_ENTITIES", entities))
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return redistest.Start(b), ids, envInt("E2E_TICKS", 3), time.Duration(envInt("E2E_EVERY", 10)) * time.Second
}

// BenchmarkTick runs tickd (the scheduler as a library, a no-op Go
// handler) and the hand-written peer over the same entities on one
// throwaway redis-server, one after the other, and reports both and their
// ratios.
func BenchmarkTick(b *testing.B) {
	replicas := envInt("E2E_REPLICAS", 1)
	srv, ids, ticks, every := setup(b, 100000)
	for range b.N {
		t := runTickd(b, srv.Addr, ids, replicas, ticks, every)
		b.Logf("tickd, %d replica(s): %v", replicas, t)
		b.ReportMetric(t.median().Seconds(), "tickd-s/tick")
		b.ReportMetric(t.redisUS/float64(t.runs), "tickd-redis-µs/run")
		b.ReportMetric(t.ownUS/float64(t.runs), "tickd-cpu-µs/run")
		b.ReportMetric(float64(t.commands)/float64(t.runs), "tickd-cmds/run")
		if t.dup+t.lost > 0 {
			b.Errorf("runs not exactly once per tick: tickd %+v", t)
		}
		if os.Getenv("E2E_PEER") == "0" {
			continue
		}
		p := runPeer(b, srv.Addr, ids, ticks, every)
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
}

// BenchmarkReplicas measures what several replicas cost Redis against one
// (BRIEF.md, "Speed": several replicas must not multiply the Redis work per
// run): tickd with 1 replica, then with E2E_REPLICAS (3), over the same
// entities (E2E_ENTITIES, 20000) on one redis-server, in each round (one
// per -count), and reports both and their ratio. Each entity must run
// exactly once per tick, and each replica must run at least half its
// share.
func BenchmarkReplicas(b *testing.B) {
	replicas := envInt("E2E_REPLICAS", 3)
	srv, ids, ticks, every := setup(b, 20000)
	for range b.N {
		one := runTickd(b, srv.Addr, ids, 1, ticks, every)
		b.Logf("tickd, 1 replica: %v", one)
		many := runTickd(b, srv.Addr, ids, replicas, ticks, every)
		b.Logf("tickd, %d replicas: %v", replicas, many)
		perRun := func(s side) float64 { return s.redisUS / float64(s.runs) }
		b.ReportMetric(perRun(one), "one-redis-µs/run")
		b.ReportMetric(perRun(many), "many-redis-µs/run")
		b.ReportMetric(perRun(many)/perRun(one), "redis-cpu-ratio")
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
}

// runTickd runs replicas schedulers (each its own store and client) over
// ids until ticks+1 ticks are done, and measures the last ticks.
func runTickd(b *testing.B, addr string, ids []string, replicas, ticks int, every time.Duration) side {
	// The daemon's garbage collector policy, which tickd run sets (README,
	// "Operations"); E2E_GCPOLICY=0 leaves Go's default, which a program
	// embedding the scheduler has unless it chooses otherwise.
	if os.Getenv("E2E_GCPOLICY") != "0" {
		defer gcpolicy.Apply(context.Background())()
	}
	reg := &tasks.Registry{}
	reg.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil })
	t := scheduler.DefaultTask()
	t.Name, t.Every, t.Handler, t.LeaseTTL, t.Concurrency, t.Entities = "bench", every, "noop", 5*time.Second, concurrency, ids
	cfg, err := scheduler.NewConfig(scheduler.DefaultDaemon(), nil, t)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	byTick := map[int64]*tickRecord{} // by tick, Unix ns
	seenTicks := func() string {
		mu.Lock()
		defer mu.Unlock()
		out := ""
		for k, v := range byTick {
			out += fmt.Sprintf(" %v:%d", time.Unix(0, k).UTC(), v.runs)
		}
		return out
	}
	observe := func(ev scheduler.Event) {
		if ev.Kind != scheduler.EventRunEnded {
			return
		}
		now := time.Now()
		mu.Lock()
		r := byTick[ev.Tick.UnixNano()]
		if r == nil {
			r = &tickRecord{seen: make([]uint8, len(ids)), byReplica: map[string]int{}}
			byTick[ev.Tick.UnixNano()] = r
		}
		mu.Unlock()
		i, _ := strconv.Atoi(ev.Entity)
		r.mu.Lock()
		r.seen[i]++
		r.runs++
		r.byReplica[ev.Replica]++
		r.lastEnd = now
		r.mu.Unlock()
	}
	// The daemon's JSON lines, written nowhere: at info (the default) a run
	// writes two; E2E_LOG_LEVEL=warn leaves them out.
	var level slog.Level
	level.UnmarshalText([]byte(os.Getenv("E2E_LOG_LEVEL"))) //nolint:errcheck // "" is info
	quiet := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	var scheds []*scheduler.Scheduler
	var clients []*redis.Client
	for i := range replicas {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		clients = append(clients, c)
		st, err := lease.NewRedis(c, "e2e", lease.Options{Replica: "r" + strconv.Itoa(i), MaxTTL: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			st.InitEpoch(context.Background()) //nolint:errcheck
		}
		s, err := scheduler.New(cfg, scheduler.Options{Store: st, Logger: quiet, Registry: reg, Observer: observe})
		if err != nil {
			b.Fatal(err)
		}
		scheds = append(scheds, s)
		defer st.Close()
	}
	// The first tick after start is not measured: measurement starts right
	// after it ended.
	first := time.Now().Truncate(every).Add(every)
	for _, s := range scheds {
		s.Start()
	}
	done := func(T time.Time) bool {
		mu.Lock()
		r := byTick[T.UnixNano()]
		mu.Unlock()
		if r == nil {
			return false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.runs >= len(ids)
	}
	waitUntil(b, first.Add(every), func() bool { return done(first) }, seenTicks)
	cpu0, cmds0, by0 := redisStatsBy(b, addr)
	own0 := processCPU()
	out := side{byReplica: map[string]int{}}
	for k := 1; k <= ticks; k++ {
		T := first.Add(time.Duration(k) * every)
		waitUntil(b, T.Add(every), func() bool { return done(T) }, seenTicks)
	}
	cpu1, cmds1, by1 := redisStatsBy(b, addr)
	out.ownUS = processCPU() - own0
	for _, s := range scheds {
		s.Shutdown(10 * time.Second)
	}
	for _, c := range clients {
		c.Close()
	}
	for k := 1; k <= ticks; k++ {
		T := first.Add(time.Duration(k) * every)
		r := byTick[T.UnixNano()]
		out.durations = append(out.durations, r.lastEnd.Sub(T))
		out.runs += r.runs
		for rep, n := range r.byReplica {
			out.byReplica[rep] += n
		}
		for _, n := range r.seen {
			if n == 0 {
				out.lost++
			} else if n > 1 {
				out.dup += int(n) - 1
			}
		}
	}
	out.redisUS, out.commands = cpu1-cpu0, cmds1-cmds0
	b.Logf("tickd's Redis commands per run (INFO commandstats):%s", perRun(by0, by1, out.runs))
	return out
}

// runPeer is what a user writes from the articles: a timer on the same
// schedule and, for each entity, one redislock Obtain, the no-op and a
// Release, concurrency at once.
func runPeer(b *testing.B, addr string, ids []string, ticks int, every time.Duration) side {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: concurrency})
	defer c.Close()
	locker := redislock.New(c)
	tick := func(T time.Time) (time.Duration, []uint8) {
		time.Sleep(time.Until(T))
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
				l, err := locker.Obtain(context.Background(), "peer:"+id, 5*time.Second, nil)
				if err != nil {
					return // held (busy) or failed: skipped this tick
				}
				seen[i]++                       // the no-op
				l.Release(context.Background()) //nolint:errcheck
				last.Store(time.Now().UnixNano())
			}()
		}
		wg.Wait()
		return time.Unix(0, last.Load()).Sub(T), seen
	}
	first := time.Now().Truncate(every).Add(every)
	tick(first) // not measured, as tickd's first
	cpu0, cmds0 := redisStats(b, addr)
	var out side
	for k := 1; k <= ticks; k++ {
		d, seen := tick(first.Add(time.Duration(k) * every))
		out.durations = append(out.durations, d)
		for _, n := range seen {
			out.runs += int(n)
			if n == 0 {
				out.lost++
			}
		}
	}
	time.Sleep(time.Until(first.Add(time.Duration(ticks+1) * every))) // the idle rest of the last tick, as tickd's
	cpu1, cmds1 := redisStats(b, addr)
	out.redisUS, out.commands = cpu1-cpu0, cmds1-cmds0
	return out
}

// waitUntil polls cond until it holds, failing with what state says when
// deadline has passed by a minute.
func waitUntil(b *testing.B, deadline time.Time, cond func() bool, state func() string) {
	for !cond() {
		if time.Now().After(deadline.Add(time.Minute)) {
			b.Fatal("tick not done a minute after the next one; runs per tick:" + state())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cmdStat is one command's line of INFO commandstats: calls, and the µs
// spent executing them (for a script, the script's run).
type cmdStat struct {
	calls int64
	usec  float64
}

// perRun says, for each command that ran, its calls and µs per run.
func perRun(before, after map[string]cmdStat, runs int) string {
	var names []string
	for k := range after {
		names = append(names, k)
	}
	sort.Strings(names)
	out := ""
	for _, k := range names {
		calls, usec := after[k].calls-before[k].calls, after[k].usec-before[k].usec
		if calls > 0 {
			out += fmt.Sprintf(" %s %.4f calls %.2f µs;", k, float64(calls)/float64(runs), usec/float64(runs))
		}
	}
	return out
}

// processCPU is this process's CPU time so far (user and system), µs: the
// schedulers', and the little the benchmark's observer adds.
func processCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // cannot fail for RUSAGE_SELF
	return float64(ru.Utime.Sec+ru.Stime.Sec)*1e6 + float64(ru.Utime.Usec+ru.Stime.Usec)
}

// redisStats reads Redis's main-thread CPU (µs) and the commands it ran.
func redisStats(b *testing.B, addr string) (float64, int64) {
	cpu, cmds, _ := redisStatsBy(b, addr)
	return cpu, cmds
}

// redisStatsBy is redisStats with INFO commandstats by command.
func redisStatsBy(b *testing.B, addr string) (float64, int64, map[string]cmdStat) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var cpu float64
	var cmds int64
	by := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case k == "used_cpu_sys_main_thread" || k == "used_cpu_user_main_thread":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f * 1e6
		case strings.HasPrefix(k, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			cmds += n
			var usec float64
			if _, u, ok := strings.Cut(v, "usec="); ok {
				u, _, _ = strings.Cut(u, ",")
				usec, _ = strconv.ParseFloat(u, 64)
			}
			by[strings.TrimPrefix(k, "cmdstat_")] = cmdStat{n, usec}
		}
	}
	return cpu, cmds, by
}
