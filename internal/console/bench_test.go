package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
)

// BenchmarkPageView1M: the pages of a task with 1,000,000 entities on a
// real Redis (CONSOLE_BENCH_ENTITIES changes the number): the server time
// and Redis CPU of one view, which is also one refresh — the task page,
// its next page of entities, a prefix search, a substring search (capped at
// maxScan entities looked at), the tasks page, and /api/status (tickd
// status -json's document, bounded as without -all). Targets: under 100 ms
// and under 10 ms of Redis CPU a view.
//
//	go test -run XXX -bench PageView1M -benchtime 20x ./console
func BenchmarkPageView1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CONSOLE_BENCH_ENTITIES")); err == nil {
		n = v
	}
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { c.Close() })
	store, err := stores.Redis(c, "bench", lease.Options{Replica: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Stop(context.Background()) })
	ctx := context.Background()
	if err := store.InitEpoch(ctx); err != nil {
		b.Fatal(err)
	}
	fill(b, store, n)
	fillDue(b, store, n/5)
	cfg, err := config.Parse("b.toml", []byte(`
[[tasks]]
name = "big"
every = "15m"
handler = "h"
entities_file = "/nonexistent/big-entities"
`))
	if err != nil {
		b.Fatal(err)
	}
	con, err := New(Options{Config: cfg, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(Anyone(con, Viewer))
	b.Cleanup(hs.Close)
	// The second page's cursor, from the first.
	_, first := get(b, hs.URL+"/tasks/big")
	next := ""
	if i := strings.Index(first, `href="/tasks/big?cursor=`); i >= 0 {
		next = first[i+len(`href="`):]
		next = strings.ReplaceAll(next[:strings.IndexByte(next, '"')], "&amp;", "&")
	}
	if next == "" {
		b.Fatal("the task page has no next page")
	}
	views(b, c, hs.URL, []view{
		{"task", "/tasks/big"}, {"next", next}, {"prefix", "/tasks/big?q=user-00042&mode=prefix"},
		{"substring", "/tasks/big?q=4242&mode=substring"}, {"tasks", "/"},
		{"api-status", "/api/status?task=big"}, // what tickd status -json reads without -all
	})
}

// view is a page a benchmark views, by name.
type view struct{ name, path string }

// views benchmarks each view of the console at base: server time and the
// Redis CPU of c's server, a view.
func views(b *testing.B, c *redis.Client, base string, vs []view) {
	for _, v := range vs {
		b.Run(v.name, func(b *testing.B) {
			cpu0 := redistest.MainThreadCPU(b, c)
			start := time.Now()
			for range b.N {
				if code, _ := get(b, base+v.path); code != http.StatusOK {
					b.Fatalf("%s: %d", v.path, code)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/view")
			b.ReportMetric((redistest.MainThreadCPU(b, c)-cpu0)/1000/float64(b.N), "redis-ms/view")
		})
	}
}

// fill gives task "big" n entities, half of them with a last run, a tenth
// held, as releases and grants leave them: n/256 batches.
func fill(b *testing.B, s *lease.Store, n int) {
	ctx := context.Background()
	reqs := make([]driver.Request, 0, driver.BatchSize)
	for i := 0; i < n; i += driver.BatchSize {
		reqs = reqs[:0]
		for j := i; j < min(n, i+driver.BatchSize); j++ {
			reqs = append(reqs, driver.Request{Task: "big", Entity: fmt.Sprintf("user-%07d", j), TTL: time.Hour, Reason: driver.ReasonTrigger})
		}
		for k, r := range s.AcquireBatch(ctx, reqs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if (i+k)%10 != 0 {
				r.Lease.ReleaseThen(driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}, nil, released{})
			}
		}
	}
}

// fillDue leaves n runs of big pending, an hour away, as a trigger -force
// of its entities leaves them while they drain.
func fillDue(b *testing.B, s *lease.Store, n int) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if err := s.Enqueue(context.Background(), driver.Due{Task: "big", Entity: fmt.Sprintf("user-%07d", i), Reason: driver.ReasonTrigger}, time.Hour); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func get(b testing.TB, u string) (int, string) {
	resp, err := http.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// released is an AfterRelease that does nothing.
type released struct{}

func (released) AfterRelease(lease.Released, error) {}

// BenchmarkTasksPage10k: the tasks page of a config of 10,000 tasks on a
// real Redis, server time and Redis CPU a view (CONSOLE_BENCH_TASKS
// changes the number). Target: under 100 ms and 10 ms of Redis CPU.
//
//	go test -run XXX -bench TasksPage10k -benchtime 20x ./console
func BenchmarkTasksPage10k(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("CONSOLE_BENCH_TASKS")); err == nil {
		n = v
	}
	hs, c := manyTasks(b, n)
	views(b, c, hs.URL, []view{{"first", "/"}, {"last", fmt.Sprintf("/?from=%d", n-taskRows)}, {"search", "/?q=task-042"}})
}
