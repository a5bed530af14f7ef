package e2ebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // BF_PPROF_r0
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// The backfill benchmark's tasks: "sync", every 15 minutes over BF_ENTITIES
// entities (10,000), whose past BF_DAYS days (7: 672 ticks, 6.72 million
// runs) are backfilled, its handler marking each (entity, tick) in a
// checker Redis of its own (a bit per entity in seen:TICK; a bit found set
// already counts in dups); and "live", every bfLiveEvery over 1,000
// entities, a no-op, whose ticks' first-start lag is compared while idle
// and while the backfill runs.
const (
	bfPrefix    = "bf"
	bfLiveEvery = 5 * time.Second
	bfLive      = 1000
)

// BenchmarkBackfill backfills 7 days of a 15-minute task over 10,000
// entities with two replicas (processes of this test binary), kill -9s the
// one running it when half its ticks are done, and reports: the dry run's
// count against the ticks times the entities; the runs made, and twice
// (none may be); the time it took; the live task's first-start lag while
// idle and while it ran; Redis's memory for the range's records:
//
//	go test -run XXX -bench Backfill -benchtime 1x -timeout 60m ./cmd/tickd/internal/e2ebench
func BenchmarkBackfill(b *testing.B) {
	n, days := envInt("BF_ENTITIES", 10_000), envInt("BF_DAYS", 7)
	for range b.N {
		e := newBFEnv(b, n)
		c, cc, st, cfg, reps := e.c, e.cc, e.st, e.cfg, e.reps
		idleFrom := time.Now()
		sleepUntil(idleFrom.Add(6 * bfLiveEvery)) // the live task's ticks on an idle daemon: the figures' time, not a wait for a condition
		idle := liveLag(b, st, idleFrom, time.Now())

		task, _ := cfg.Task("sync")
		to := time.Now().UTC().Truncate(15 * time.Minute).Add(-15 * time.Minute)
		from := to.Add(-time.Duration(days)*24*time.Hour + 15*time.Minute)
		plan, err := ops.PlanBackfill(context.Background(), st, *task, driver.Backfill{From: from, To: to, By: "bench"}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if want := int64(plan.Ticks) * int64(n); plan.Runs != want {
			b.Errorf("the dry run counts %d runs, want %d (%d ticks x %d entities)", plan.Runs, want, plan.Ticks, n)
		}
		mem0 := usedMemory(b, c)
		start := time.Now()
		if _, err := ops.StartBackfill(context.Background(), st, task, plan); err != nil {
			b.Fatal(err)
		}
		end, killed := followBackfill(b, st, plan.Backfill.ID, reps)
		took := end.Ended.Sub(start)
		busy := liveLag(b, st, start, end.Ended)
		made, dups := seen(b, cc)
		b.Logf("backfill of %d ticks x %d entities: dry run %d, runs made %d (%d twice), in %v (%.0f runs/s); counted ran %d, run before %d, busy %d, failed %d; kill -9 of %s at %d ticks",
			plan.Ticks, n, plan.Runs, made, dups, took.Round(time.Second), float64(made)/took.Seconds(), end.Ran, end.Skipped, end.Busy, end.Failed, killed, end.Ticks/2)
		b.Logf("live ticks' first-start lag: idle %v, during the backfill %v (%.2fx)", idle, busy, float64(busy)/float64(idle))
		b.Logf("Redis memory: %s", recordMemory(b, c, mem0))
		if dups > 0 {
			b.Errorf("%d (entity, tick)s ran twice", dups)
		}
		// A run the killed replica was granted and had not begun is not run
		// again: at most once. Its runs in flight are at most half its slots.
		if lostBound := int64(concurrency / 2); made > plan.Runs || made < plan.Runs-lostBound {
			b.Errorf("%d runs made of %d planned (at most %d lost to the kill)", made, plan.Runs, lostBound)
		}
		b.ReportMetric(float64(made)/took.Seconds(), "runs/s")
		b.ReportMetric(float64(busy)/float64(idle), "live-lag-ratio")
		for _, r := range reps {
			r.stop()
		}
	}
}

// bfEnv is a backfill benchmark's Redis (c), its checker's (cc), an
// operator's store, the config, and two replicas running it.
type bfEnv struct {
	c, cc *redis.Client
	st    *lease.Store
	cfg   *config.Config
	reps  []*bfReplica
}

// newBFEnv starts the Redis servers and the two replicas over n entities.
func newBFEnv(b *testing.B, n int) bfEnv {
	srv, chk := redistest.Start(b), redistest.Start(b)
	e := bfEnv{c: redis.NewClient(&redis.Options{Addr: srv.Addr}), cc: redis.NewClient(&redis.Options{Addr: chk.Addr})}
	var err error
	if e.st, err = stores.Redis(e.c, bfPrefix, lease.Options{Replica: "operator"}); err != nil {
		b.Fatal(err)
	}
	e.st.InitEpoch(context.Background()) //nolint:errcheck
	if e.cfg, err = bfConfig(n); err != nil {
		b.Fatal(err)
	}
	e.reps = []*bfReplica{startBFReplica(b, "r0", srv.Addr, chk.Addr, n), startBFReplica(b, "r1", srv.Addr, chk.Addr, n)}
	return e
}

// bfConfig is the benchmark's config: sync and live.
func bfConfig(n int) (*config.Config, error) {
	sync := config.DefaultTask()
	sync.Name, sync.Every, sync.Handler, sync.LeaseTTL, sync.Concurrency, sync.Entities = "sync", 15*time.Minute, "seen", 30*time.Second, concurrency, entityIDs(n)
	sync.RunRecord = 720 * time.Hour
	sync.HistoryTicks = 2000
	live := config.DefaultTask()
	live.Name, live.Every, live.Handler, live.LeaseTTL, live.Concurrency, live.Entities = "live", bfLiveEvery, "noop", 30*time.Second, concurrency, entityIDs(bfLive)
	return config.New(config.DefaultDaemon(), nil, sync, live)
}

// bfReplica is a replica's process.
type bfReplica struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// startBFReplica starts replica name in a process of this test binary
// (TestMain: serveBFReplica), and waits until it runs.
func startBFReplica(b *testing.B, name, addr, checker string, n int) *bfReplica {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BF_REPLICA="+name, "BF_ADDR="+addr, "BF_CHECKER="+checker, "BF_ENTITIES="+strconv.Itoa(n))
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
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("replica %s: %q %v", name, line, err)
	}
	return &bfReplica{name: name, cmd: cmd, in: in}
}

// kill kill -9s the replica.
func (r *bfReplica) kill() { r.cmd.Process.Signal(syscall.SIGKILL) } //nolint:errcheck

// stop ends the replica: it stops when its input closes.
func (r *bfReplica) stop() {
	r.in.Close()
	r.cmd.Wait() //nolint:errcheck // killed, or its failure said on stderr
}

// serveBFReplica is a replica's process: the benchmark's config on
// BF_ADDR, its handlers marking runs on BF_CHECKER; it says "ready" once
// started, and stops when its input closes.
func serveBFReplica(name string) error {
	if addr := os.Getenv("BF_PPROF_" + name); addr != "" { // a profile of this replica, to see where its time goes
		go http.ListenAndServe(addr, nil) //nolint:errcheck,gosec // loopback, for the benchmark's author
	}
	n := envInt("BF_ENTITIES", 10_000)
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("BF_ADDR"), PoolSize: 64})
	chk := redis.NewClient(&redis.Options{Addr: os.Getenv("BF_CHECKER"), PoolSize: concurrency})
	st, err := stores.Redis(c, bfPrefix, lease.Options{Replica: name, MaxTTL: 30 * time.Second})
	if err != nil {
		return err
	}
	reg := &tasks.Registry{}
	reg.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil }) //nolint:errcheck
	reg.Register("seen", func(ctx context.Context, run tasks.Run) (tasks.Result, error) {                   //nolint:errcheck
		i, _ := strconv.Atoi(run.Entity) //nolint:errcheck // entityIDs's: decimal
		old, err := chk.SetBit(ctx, "seen:"+strconv.FormatInt(run.Tick.UnixMilli(), 10), int64(i), 1).Result()
		if err == nil && old == 1 {
			chk.Incr(ctx, "dups")
		}
		return tasks.Done, err
	})
	cfg, err := bfConfig(n)
	if err != nil {
		return err
	}
	s, err := scheduler.New(cfg, scheduler.Options{Store: st, Logger: slog.New(slog.DiscardHandler), Registry: reg})
	if err != nil {
		return err
	}
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // until it closes
	return s.Stop(context.Background())
}

// followBackfill waits for backfill id to end, kill -9ing the replica
// that runs it once half its ticks are done; it returns the backfill as
// it ended, and whom it killed.
func followBackfill(b *testing.B, st *lease.Store, id string, reps []*bfReplica) (driver.Backfill, string) {
	killed := ""
	for deadline := time.Now().Add(2 * time.Hour); time.Now().Before(deadline); sleepUntil(time.Now().Add(time.Second)) { // progress is polled, as tickd backfill -wait does
		bs, err := st.Fleet().Backfills(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		i := slices.IndexFunc(bs, func(x driver.Backfill) bool { return x.ID == id })
		if i < 0 {
			b.Fatalf("backfill %s is gone", id)
		}
		bf := bs[i]
		if !bf.Ended.IsZero() {
			return bf, killed
		}
		if killed == "" && os.Getenv("BF_KILL") != "0" && bf.Ticks >= (bf.Total-len(bf.Unknown))/2 && bf.Holder != "" {
			for _, r := range reps {
				if strings.HasPrefix(bf.Holder, r.name+"/") {
					r.kill()
					killed = r.name
				}
			}
		}
	}
	b.Fatalf("backfill %s has not ended in 2 hours", id)
	return driver.Backfill{}, ""
}

// liveLag is the median first-start lag of the live task's ticks in
// [from, to].
func liveLag(b *testing.B, st *lease.Store, from, to time.Time) time.Duration {
	recs, err := st.Fleet().Ticks(context.Background(), "live", 10_000)
	if err != nil {
		b.Fatal(err)
	}
	var lags []time.Duration
	for _, r := range recs {
		if r.Tick.Before(from) || r.Tick.After(to) {
			continue
		}
		first := time.Duration(-1)
		for _, p := range r.Parts {
			if p.FirstStart >= 0 && (first < 0 || p.FirstStart < first) {
				first = p.FirstStart
			}
		}
		if first >= 0 {
			lags = append(lags, first)
		}
	}
	if len(lags) == 0 {
		b.Fatalf("no live tick from %v to %v", from, to)
	}
	slices.Sort(lags)
	return lags[len(lags)/2]
}

// seen counts the (entity, tick)s the handlers marked, and those marked
// twice.
func seen(b *testing.B, cc *redis.Client) (made, dups int64) {
	ctx := context.Background()
	it := cc.Scan(ctx, 0, "seen:*", 1000).Iterator()
	for it.Next(ctx) {
		n, err := cc.BitCount(ctx, it.Val(), nil).Result()
		if err != nil {
			b.Fatal(err)
		}
		made += n
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	dups, _ = cc.Get(ctx, "dups").Int64() //nolint:errcheck // none: 0
	return made, dups
}

// usedMemory is Redis's used_memory, bytes.
func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.InfoMap(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	v, _ := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64) //nolint:errcheck // Redis's digits
	return v
}

// recordMemory says what the run record and the fan marks take in Redis,
// key by key (MEMORY USAGE), and used_memory's growth since mem0.
func recordMemory(b *testing.B, c *redis.Client, mem0 int64) string {
	ctx := context.Background()
	by := map[string]int64{}
	count := map[string]int{}
	it := c.Scan(ctx, 0, bfPrefix+":*", 1000).Iterator()
	for it.Next(ctx) {
		k := it.Val()
		kind := ""
		switch {
		case strings.Contains(k, ":ran:"):
			kind = "run record bitmaps"
		case strings.HasSuffix(k, ":ix"):
			kind = "entity numbers"
		case strings.Contains(k, ":fan:"):
			kind = "fan marks"
		default:
			continue
		}
		n, err := c.MemoryUsage(ctx, k).Result()
		if err != nil {
			b.Fatal(err)
		}
		by[kind] += n
		count[kind]++
	}
	var parts []string
	for _, kind := range []string{"run record bitmaps", "entity numbers", "fan marks"} {
		parts = append(parts, fmt.Sprintf("%s %d keys, %.1f KB", kind, count[kind], float64(by[kind])/1024))
	}
	return strings.Join(parts, "; ") + fmt.Sprintf("; used_memory grew %.1f MB", float64(usedMemory(b, c)-mem0)/1e6)
}

// BenchmarkBackfillTen starts ten backfills at once, each of one day of
// the 15-minute task over BF_TEN_ENTITIES entities (1,000: 96,000 runs
// each), on two replicas, and reports when each made its first progress
// and ended: every one must progress (Temporal's stall once ten run at
// once, temporal PR #11161), and none run an (entity, tick) twice:
//
//	go test -run XXX -bench BackfillTen -benchtime 1x -timeout 60m ./cmd/tickd/internal/e2ebench
func BenchmarkBackfillTen(b *testing.B) {
	n := envInt("BF_TEN_ENTITIES", 1000)
	for range b.N {
		e := newBFEnv(b, n)
		cc, st, cfg, reps := e.cc, e.st, e.cfg, e.reps
		task, _ := cfg.Task("sync")
		last := time.Now().UTC().Truncate(15 * time.Minute).Add(-15 * time.Minute)
		start := time.Now()
		var planned int64
		ids := map[string]int{} // backfill id -> its day
		for d := range 10 {
			to := last.Add(-time.Duration(d) * 24 * time.Hour)
			plan, err := ops.PlanBackfill(context.Background(), st, *task, driver.Backfill{From: to.Add(-24*time.Hour + 15*time.Minute), To: to, By: "bench"}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ops.StartBackfill(context.Background(), st, task, plan); err != nil {
				b.Fatal(err)
			}
			planned += plan.Runs
			ids[plan.Backfill.ID] = d
		}
		firsts, ends := map[string]time.Duration{}, map[string]time.Duration{}
		for deadline := time.Now().Add(time.Hour); len(ends) < len(ids) && time.Now().Before(deadline); sleepUntil(time.Now().Add(time.Second)) { // polled, as tickd backfill -wait does
			bs, err := st.Fleet().Backfills(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			for _, bf := range bs {
				if _, seen := firsts[bf.ID]; !seen && bf.Ticks > 0 {
					firsts[bf.ID] = time.Since(start)
				}
				if _, seen := ends[bf.ID]; !seen && !bf.Ended.IsZero() {
					ends[bf.ID] = bf.Ended.Sub(start)
				}
			}
		}
		made, dups := seen(b, cc)
		var lines []string
		for id, d := range ids {
			lines = append(lines, fmt.Sprintf("day -%d: first tick done after %v, ended after %v", d+1, firsts[id].Round(time.Second), ends[id].Round(time.Second)))
		}
		slices.Sort(lines)
		b.Logf("ten backfills of a day x %d entities at once, on two replicas: %d runs planned, %d made (%d twice)\n%s", n, planned, made, dups, strings.Join(lines, "\n"))
		if len(ends) < len(ids) || dups > 0 || made != planned {
			b.Errorf("%d of %d ended, %d runs made of %d, %d twice", len(ends), len(ids), made, planned, dups)
		}
		for _, r := range reps {
			r.stop()
		}
	}
}
