package e2ebench

import (
	"archive/zip"
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/tasks"
)

// BenchmarkZonedDay runs one local day of cron "0 9 * * *" over
// E2E_ENTITIES (1,000,000) entities spread over E2E_ZONES (400) IANA zones
// (timezone_from), and the same task with every entity in the task's one
// zone, each on a redis-server of its own, and reports
// both and their ratios: Redis commands and CPU per run, the fan-outs (one
// per distinct instant), and the idle daemon's Redis commands a second
// (over 5 seconds, 3 seconds after the day). Each entity must run exactly once.
//
// The day is the catch-up of the 24 hours before the scheduler's clock
// (catch_up = "24h", the clock set to yesterday's 12:00 UTC): each zone's latest 09:00
// is caught up, one fan-out per distinct instant of the zones it is the
// latest of; the runs are the runs of those ticks, as a timer would start
// them at each instant.
//
//	go test -run XXX -bench ZonedDay -benchtime 1x -timeout 60m ./cmd/tickd/internal/e2ebench
func BenchmarkZonedDay(b *testing.B) {
	n := envInt("E2E_ENTITIES", 1_000_000)
	zones := spreadZones(b, envInt("E2E_ZONES", 400))
	dir := b.TempDir()
	for round := range b.N {
		// Each day on a redis-server of its own: the second on one that held
		// the first's million records was slower per command for that alone.
		one := runDay(b, redistest.Start(b).Addr, fmt.Sprintf("one%d", round), writeShops(b, dir, n, zones[:1]), false)
		b.Logf("one zone: %v", one)
		many := runDay(b, redistest.Start(b).Addr, fmt.Sprintf("many%d", round), writeShops(b, dir, n, zones), true)
		b.Logf("%d zones: %v", len(zones), many)
		b.ReportMetric(float64(many.fanOuts), "fan-outs")
		b.ReportMetric(many.cmdsPerRun(), "zoned-cmds/run")
		b.ReportMetric(many.redisPerRun(), "zoned-redis-µs/run")
		b.ReportMetric(many.cmdsPerRun()/one.cmdsPerRun(), "cmds-ratio")
		b.ReportMetric(many.redisPerRun()/one.redisPerRun(), "redis-cpu-ratio")
		b.ReportMetric(float64(many.idleCmds), "zoned-idle-cmds/s")
		b.ReportMetric(float64(one.idleCmds), "one-idle-cmds/s")
		for _, d := range []day{one, many} {
			if d.dup+d.lost > 0 {
				b.Errorf("runs not exactly once per entity in the day: %v", d)
			}
		}
	}
}

// day is what one local day cost.
type day struct {
	side
	fanOuts  int           // ticks fanned out
	elapsed  time.Duration // from start to the last run's end
	idleCmds int64         // Redis commands a second, idle after the day
}

func (d day) cmdsPerRun() float64  { return float64(d.commands) / float64(d.runs) }
func (d day) redisPerRun() float64 { return d.redisUS / float64(d.runs) }

func (d day) String() string {
	return fmt.Sprintf("%d runs in %v, %d fan-outs, Redis CPU %.1f µs/run, %.3f commands/run, dup %d, lost %d, own CPU %.1f µs/run, idle %d commands/s; by command:%s",
		d.runs, d.elapsed.Round(time.Millisecond), d.fanOuts, d.redisPerRun(), d.cmdsPerRun(), d.dup, d.lost, d.ownUS/float64(d.runs), d.idleCmds,
		perRun(d.byCommand, d.runs))
}

// shifted is the system clock moved by d.
type shifted time.Duration

func (s shifted) Now() time.Time { return time.Now().Add(time.Duration(s)) }

// runDay runs the day of the task over the entities in file (their
// zones from tz when zoned, else all in UTC) under prefix, and measures it.
func runDay(b *testing.B, addr, prefix, file string, zoned bool) day {
	b.Helper()
	ctx := context.Background()
	n := lineCount(b, file)
	reg := &tasks.Registry{}
	reg.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil }) //nolint:errcheck
	t := config.DefaultTask()
	t.Name, t.Cron, t.Handler, t.LeaseTTL, t.Concurrency, t.CatchUp = "digest", "0 9 * * *", "noop", 5*time.Second, concurrency, 24*time.Hour
	t.EntitiesFile, t.EntitiesFormat = file, tasks.FormatJSONL
	if zoned {
		t.TimezoneFrom = "tz"
	}
	cfg, err := config.New(config.DefaultDaemon(), nil, t)
	if err != nil {
		b.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	defer c.Close()
	st, err := stores.Redis(c, prefix, lease.Options{Replica: "r0", MaxTTL: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Stop(ctx)
	st.InitEpoch(ctx) //nolint:errcheck
	seen := make([]uint32, n)
	var ended, fanOuts atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	observe := func(ev scheduler.Event) {
		switch ev.Kind {
		case scheduler.EventTick:
			fanOuts.Add(1)
		case scheduler.EventRunEnded:
			i, _ := strconv.Atoi(ev.Entity)
			atomic.AddUint32(&seen[i], 1)
			if ended.Add(1) == int64(n) {
				once.Do(func() { close(all) })
			}
		}
	}
	noon := time.Now().UTC().Truncate(24 * time.Hour).Add(-12 * time.Hour) // yesterday's: Redis refuses a tick ahead of its clock
	s, err := scheduler.New(cfg, scheduler.Options{Store: st, Logger: slog.New(logs.NewJSON(io.Discard, slog.LevelWarn)), Registry: reg,
		Observer: observe, Clock: shifted(time.Until(noon))})
	if err != nil {
		b.Fatal(err)
	}
	s0 := takeSample(b, []string{addr})
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(30 * time.Minute):
		b.Fatalf("%d of %d runs after 30 minutes", ended.Load(), n)
	}
	elapsed := time.Since(start)
	s1 := takeSample(b, []string{addr})
	// The idle daemon: 5 seconds measured, after 3 for the day's last
	// history writes (a window, not a wait for a condition).
	time.Sleep(3 * time.Second)
	i0 := takeSample(b, []string{addr})
	time.Sleep(5 * time.Second)
	i1 := takeSample(b, []string{addr})
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	s.Stop(stopCtx) //nolint:errcheck
	cancel()
	d := day{side: side{byReplica: map[string]int{}, byCommand: map[string]cmdStat{}}, elapsed: elapsed, idleCmds: (i1.cmds - i0.cmds) / 5}
	d.add(s0, s1)
	d.ownUS = s1.ownUS - s0.ownUS
	d.runs, d.fanOuts = int(ended.Load()), int(fanOuts.Load())
	for _, k := range seen {
		if k == 0 {
			d.lost++
		} else if k > 1 {
			d.dup += int(k) - 1
		}
	}
	return d
}

// writeShops writes n entities, "0" to n-1, entity i in zones[i%len] (with
// E2E_ZONE_ORDER=blocks, each zone's entities one block of the file), as
// JSON lines, and returns the file.
func writeShops(b *testing.B, dir string, n int, zones []string) string {
	b.Helper()
	path := filepath.Join(dir, fmt.Sprintf("shops-%d.jsonl", len(zones)))
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	blocks := os.Getenv("E2E_ZONE_ORDER") == "blocks"
	for i := range n {
		z := zones[i%len(zones)]
		if blocks {
			z = zones[i*len(zones)/n]
		}
		fmt.Fprintf(w, "{\"id\": \"%d\", \"tz\": %q}\n", i, z)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path
}

func lineCount(b *testing.B, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// spreadZones is n zones of Go's own database (lib/time/zoneinfo.zip),
// taken evenly over its list; the first is UTC.
func spreadZones(b *testing.B, n int) []string {
	b.Helper()
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatalf("go env GOROOT: %v", err)
	}
	z, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(root)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		b.Fatal(err)
	}
	defer z.Close()
	var all []string
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") && f.Name != "UTC" {
			if _, err := time.LoadLocation(f.Name); err == nil {
				all = append(all, f.Name)
			}
		}
	}
	if n-1 > len(all) {
		b.Fatalf("%d zones asked for, %d in Go's database", n, len(all)+1)
	}
	out := []string{"UTC"}
	for i := range n - 1 {
		out = append(out, all[i*len(all)/(n-1)])
	}
	return out
}
