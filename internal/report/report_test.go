package report

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
)

var bg = context.Background()

// world is an in-process store where task "t" (entities a, b) ran a tick:
// a done, b still held; the task is paused.
func world(t *testing.T) (*lease.Store, *config.Config, time.Time) {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"t\"\nevery = \"1m\"\ncommand = [\"true\"]\nentities = [\"a\", \"b\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	task := &cfg.Tasks[0]
	s := stores.Memory(lease.Options{Replica: "r1"})
	t.Cleanup(func() { s.Stop(bg) }) //nolint:errcheck // a lease is left held on purpose
	T := time.Now().UTC().Truncate(time.Minute)
	a, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "a", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(bg, driver.Finished{Outcome: driver.OutcomeDone, Started: T, Ended: T.Add(time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(bg, driver.Request{Task: "t", Entity: "b", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T}); err != nil {
		t.Fatal(err)
	}
	part := driver.TickPart{Replica: "r1", Process: "1", Final: true, Written: T.Add(time.Second), Entities: 2, Started: 2,
		Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 2}}
	if err := s.Fleet().RecordTicks(bg, []driver.TickWrite{{Task: "t", Tick: T, Part: part, Keep: leaseconf.Retention(task)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().Pause(bg, "t", driver.PauseInfo{By: "ops", At: T, Reason: "deploy"}); err != nil {
		t.Fatal(err)
	}
	return s, cfg, T
}

// TestStatusSaysWhatTheStoreHolds: the status of a task: its held lease
// with holder and fence, its last run's outcome, its pause.
func TestStatusSaysWhatTheStoreHolds(t *testing.T) {
	t.Parallel()
	s, cfg, _ := world(t)
	st, err := ReadStatus(bg, s, cfg, "", 10, StatusScan, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "tasks", len(st.Tasks), 1)
	ts := st.Tasks[0]
	expect.True(t, fmt.Sprintf("held: %+v", ts.Leases), len(ts.Leases) == 1 && ts.Leases[0].Entity == "b" && ts.Leases[0].Holder == "r1" && ts.Leases[0].Fence > 0)
	expect.True(t, "paused by ops", ts.Paused)
	doc := st.Doc()
	expect.True(t, fmt.Sprintf("the document's task: %+v", doc.Tasks), len(doc.Tasks) == 1 && doc.Tasks[0].Name == "t" && doc.Tasks[0].Paused)
}

// TestHistoryOfATask: the tick recorded, and FindTask's answers for a task
// of the config, of the registry only, and of no one.
func TestHistoryOfATask(t *testing.T) {
	t.Parallel()
	s, cfg, T := world(t)
	task, err := FindTask(bg, s, cfg, "t")
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHistory(bg, s, task, 5, T.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	doc := h.Doc()
	expect.True(t, fmt.Sprintf("ticks: %+v", doc.Ticks), len(doc.Ticks) >= 1 && doc.Ticks[0].State == "complete" && doc.Ticks[0].Runs == 2)
	if err := s.Fleet().RegisterTasks(bg, []driver.TaskInfo{{Name: "old", Schedule: "every 1h0m0s", Timezone: "UTC", Seen: T, By: "r9"}}); err != nil {
		t.Fatal(err)
	}
	old, err := FindTask(bg, s, cfg, "old")
	expect.True(t, fmt.Sprintf("a task only the registry knows: %v, %v", old, err), err == nil && old.Name == "old")
	_, err = FindTask(bg, s, cfg, "nope")
	expect.True(t, fmt.Sprintf("a task nobody knows: %v", err), err != nil && strings.Contains(err.Error(), `no task "nope"`))
}

// TestDocumentsAreSnakeCase: every key of the status and history
// documents is snake_case, as BRIEF's output contract for scripts and
// docs/operations.md say.
func TestDocumentsAreSnakeCase(t *testing.T) {
	t.Parallel()
	s, cfg, T := world(t)
	st, err := ReadStatus(bg, s, cfg, "", 10, StatusScan, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHistory(bg, s, &cfg.Tasks[0], 5, T.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for name, doc := range map[string]any{"status": st.Doc(), "history": h.Doc()} {
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys(v, "") {
			if !snake.MatchString(k[strings.LastIndex(k, ".")+1:]) {
				t.Errorf("%s document: key %s is not snake_case", name, k)
			}
		}
	}
}

// keys lists every object key of v, as paths; a map keyed by data (an
// outcome, a reason) is a key like the others, and is snake_case too.
func keys(v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, at+"."+k)
			out = append(out, keys(e, at+"."+k)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, keys(e, at+"[]")...)
		}
	}
	return out
}

// TestStatusWhileATaskIsResharded: while tickd migrate moves one task, the
// status of it says so and the others' is read (every task's failed).
func TestStatusWhileATaskIsResharded(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	s, err := stores.Redis(c, "st", lease.Options{Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"moving\"\nevery = \"1m\"\ncommand = [\"true\"]\n[[tasks]]\nname = \"other\"\nevery = \"1m\"\ncommand = [\"true\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The move's mark, as tickd migrate sets it on the task's shard 0
	// (lease/redisdriver's keys: its bucket is CRC-32 of its name mod 64).
	key := fmt.Sprintf("st:{%02d}:moving:shards", crc32.ChecksumIEEE([]byte("moving"))%64)
	if err := c.Set(context.Background(), key, "m:1:4", 0).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(context.Background(), s, cfg, "", 10, 0, "", time.Now())
	expect.True(t, fmt.Sprintf("status is read: %v", err), err == nil && len(st.Tasks) == 2)
	for _, ts := range st.Tasks {
		expect.Equal(t, ts.Name+" resharding", ts.Resharding != "", ts.Name == "moving")
	}
}
