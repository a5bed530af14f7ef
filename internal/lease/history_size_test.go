package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// TestTickRecordBytes measures what a week of 15-minute tick records (the
// default retention) costs Redis, by MEMORY USAGE, with one replica and
// with three taking part, and holds it to a bound (docs/operations.md,
// "History").
func TestTickRecordBytes(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	s := newRedisStore(t, c, Options{Replica: "r"})
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		replicas int
		compress bool
	}{{1, false}, {3, false}, {1, true}, {3, true}} {
		replicas := tc.replicas
		depth := map[bool]string{true: "1", false: "0"}[tc.compress]
		if err := c.ConfigSet(bg, "list-compress-depth", depth).Err(); err != nil {
			t.Fatal(err)
		}
		task := fmt.Sprintf("sync-users-%d-%v", replicas, tc.compress)
		var ws []driver.TickWrite
		for i := range driver.DefaultHistory().Ticks {
			tick := start.Add(time.Duration(i) * 15 * time.Minute)
			for r := range replicas {
				ws = append(ws, driver.TickWrite{Task: task, Tick: tick, Keep: driver.DefaultHistory(), Part: driver.TickPart{
					Replica: fmt.Sprintf("web-%d.prod-12345", r), Final: true, Written: tick.Add(40 * time.Second),
					Entities: 250, Started: 250 / replicas, Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 250/replicas - 2, driver.OutcomeFailed: 2},
					Skipped: map[string]int{"busy": 1, driver.SkipAlreadyRan: 250 - 250/replicas}, FirstStart: 4 * time.Millisecond, LastEnd: 38 * time.Second}})
			}
		}
		for i := 0; i < len(ws); i += 100 {
			if err := s.Fleet().RecordTicks(bg, ws[i:min(i+100, len(ws))]); err != nil {
				t.Fatal(err)
			}
		}
		key := redisdriver.HistoryKeys("f", task)[0]
		n, err := c.LLen(bg, key).Result()
		if err != nil || n != int64(driver.DefaultHistory().Ticks) {
			t.Fatalf("%d records kept (%v), want %d", n, err, driver.DefaultHistory().Ticks)
		}
		bytes, err := c.MemoryUsage(bg, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		per := float64(bytes) / float64(n)
		t.Logf("%d replica(s) per tick, list-compress-depth %s: %d records, %d bytes, %.0f bytes per record", replicas, depth, n, bytes, per)
		if limit := 40.0 + 90*float64(replicas); per > limit {
			t.Errorf("%.0f bytes per record with %d replica(s), want at most %.0f", per, replicas, limit)
		}
	}
}
