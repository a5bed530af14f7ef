package e2ebench

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/tasks"
)

// BenchmarkTickLag measures, on an idle daemon (one replica, a real
// redis-server, 10 entities, `every = "1s"`), how long after each tick T
// its first run starts, over E2E_LAG_TICKS ticks (100), and reports the
// median and p99 (docs/performance.md, "Targets": p99 within 10ms).
//
//	go test -run XXX -bench TickLag -benchtime 1x ./cmd/tickd/internal/e2ebench
func BenchmarkTickLag(b *testing.B) {
	ticks := envInt("E2E_LAG_TICKS", 100)
	srv := redistest.Start(b)
	reg := &tasks.Registry{}
	reg.Register("noop", func(context.Context, tasks.Run) (tasks.Result, error) { return tasks.Done, nil })
	t := config.DefaultTask()
	t.Name, t.Every, t.Handler, t.LeaseTTL = "lag", time.Second, "noop", 5*time.Second
	for i := range 10 {
		t.Entities = append(t.Entities, strconv.Itoa(i))
	}
	cfg, err := config.New(config.DefaultDaemon(), nil, t)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		st, err := stores.Redis(c, "lag", lease.Options{Replica: "r", MaxTTL: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		st.InitEpoch(context.Background()) //nolint:errcheck
		var mu sync.Mutex
		first := map[int64]time.Duration{} // by tick: its first run's start - T
		observe := func(ev scheduler.Event) {
			if ev.Kind != scheduler.EventRunStarted || ev.Reason != driver.ReasonTick {
				return
			}
			lag := time.Since(ev.Tick)
			mu.Lock()
			defer mu.Unlock()
			if d, ok := first[ev.Tick.UnixNano()]; !ok || lag < d {
				first[ev.Tick.UnixNano()] = lag
			}
		}
		s, err := scheduler.New(cfg, scheduler.Options{Store: st, Registry: reg, Observer: observe,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		// The first tick after start is left out, as a warm-up.
		start := time.Now().Truncate(time.Second).Add(time.Second)
		end := start.Add(time.Duration(ticks) * time.Second)
		waitUntil(b, end.Add(time.Second), func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for k := range first {
				if k > start.UnixNano() && k <= end.UnixNano() {
					n++
				}
			}
			return n >= ticks
		}, func() string { return "" })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.Stop(ctx) //nolint:errcheck // nil
		cancel()
		st.Stop(context.Background())
		c.Close()
		var lags []time.Duration
		for k, d := range first {
			if k > start.UnixNano() && k <= end.UnixNano() {
				lags = append(lags, d)
			}
		}
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
		b.Logf("first run after T over %d ticks: median %v, p99 %v, max %v", len(lags), p(0.5), p(0.99), lags[len(lags)-1])
		b.ReportMetric(float64(p(0.5).Microseconds())/1000, "median-ms")
		b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
		if p(0.99) > 10*time.Millisecond {
			b.Errorf("p99 lag %v, target 10ms", p(0.99))
		}
	}
}
