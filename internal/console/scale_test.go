package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
)

// manyTasks is a console over a real Redis for a config of n tasks
// (task-00000…), each with one tick record.
func manyTasks(tb testing.TB, n int) (*httptest.Server, *redis.Client) {
	tb.Helper()
	srv := redistest.Start(tb)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { c.Close() })
	store, err := stores.Redis(c, "many", lease.Options{Replica: "r"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Stop(context.Background()) })
	var b strings.Builder
	var ws []driver.TickWrite
	tick := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range n {
		name := fmt.Sprintf("task-%05d", i)
		fmt.Fprintf(&b, "[[tasks]]\nname = %q\nevery = \"15m\"\nhandler = \"h\"\n", name)
		ws = append(ws, driver.TickWrite{Task: name, Tick: tick, Keep: driver.DefaultHistory(), Part: driver.TickPart{
			Replica: "r", Final: true, Written: tick, Entities: 1, Started: 1, Outcomes: map[driver.Outcome]int{driver.OutcomeDone: 1}}})
	}
	if err := store.Fleet().RecordTicks(context.Background(), ws); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Parse("many.toml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	con, err := New(Options{Config: cfg, Store: store})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(Anyone(con, Viewer))
	tb.Cleanup(hs.Close)
	return hs, c
}

// TestTasksPagePages: with 10,000 tasks the tasks page shows 50, reads the
// history of those 50 only (100 LRANGEs, in one pipeline: before, 20,000
// commands a view), links to the next and previous pages, and finds tasks
// by name.
func TestTasksPagePages(t *testing.T) {
	hs, c := manyTasks(t, 10000)
	before := redistest.CommandCalls(t, c, "lrange")
	code, body := get(t, hs.URL+"/")
	expect.Equal(t, "the tasks page", code, http.StatusOK)
	expect.Equal(t, "LRANGEs for one view", redistest.CommandCalls(t, c, "lrange")-before, 2*taskRows)
	expect.Equal(t, "rows shown", strings.Count(body, `<a href="/tasks/task-`), taskRows)
	expect.True(t, "the first page starts with the first task", strings.Contains(body, `href="/tasks/task-00000"`))
	expect.True(t, "says which of how many", strings.Contains(body, "Tasks 1–50 of 10000"))
	expect.True(t, "a next page", strings.Contains(body, `href="/?from=50"`))

	_, body = get(t, hs.URL+"/?from=9990")
	expect.Equal(t, "rows on the last page", strings.Count(body, `<a href="/tasks/task-`), 10)
	expect.True(t, "a previous page", strings.Contains(body, `href="/?from=9940"`))
	expect.True(t, "no next page", !strings.Contains(body, "Next page"))

	_, body = get(t, hs.URL+"/?q=task-0420")
	expect.Equal(t, "tasks whose name contains task-0420", strings.Count(body, `<a href="/tasks/task-`), 10)
	expect.True(t, "the search is said", strings.Contains(body, "of 10 whose name contains"))

	code, _ = get(t, hs.URL+"/?from=-3")
	expect.Equal(t, "a negative row", code, http.StatusBadRequest)
}

// TestEntitiesFilteredByOutcome: the task page keeps the entities whose
// last run had the outcome asked for (or whose lease is held), on both
// stores, shows a page by id, and refuses an outcome that is none.
func TestEntitiesFilteredByOutcome(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	rs, err := stores.Redis(c, "f", lease.Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Stop(context.Background()) })
	rs.InitEpoch(context.Background()) //nolint:errcheck
	for name, store := range map[string]*lease.Store{"memory": nil, "redis": rs} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, false)
			if store != nil {
				e.store, e.con.store = store, store
				e.seed()
			}
			ctx := context.Background()
			for _, id := range []string{"z-done", "m-done"} {
				l, err := e.store.Acquire(ctx, driver.Request{Task: "sync", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}, nil); err != nil {
					t.Fatal(err)
				}
			}
			rows := func(outcome string) []string {
				_, body := e.do("GET", "/tasks/sync?outcome="+outcome, "", nil, nil)
				// The entities' table only: the failures below link too.
				body = body[strings.Index(body, "<h2>Entities</h2>"):]
				body = body[:strings.Index(body, "<h2>Pending")]
				var ids []string
				for _, m := range entityHref.FindAllStringSubmatch(body, -1) {
					ids = append(ids, m[1][len("/tasks/sync/entity?id="):])
				}
				return ids
			}
			expect.Same(t, "done, by id", rows("done"), []string{"m-done", "z-done"})
			expect.Same(t, "held", rows("held"), []string{"a"})
			expect.Equal(t, "failed", len(rows("failed")), 1)
			resp, _ := e.do("GET", "/tasks/sync?outcome=nope", "", nil, nil)
			expect.Equal(t, "an outcome that is none", resp.StatusCode, http.StatusBadRequest)
		})
	}
}

// TestFailuresAcrossTasks: the failures page shows the newest failures of
// every task, newest first, from one list; a batch of many failures keeps
// only its newest there.
func TestFailuresAcrossTasks(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	keep := func(string) driver.Retention { return driver.DefaultHistory() }
	var fs []driver.Failure
	for i := range 200 {
		fs = append(fs, driver.Failure{Task: "bulk", Entity: fmt.Sprint("b", i), Outcome: driver.OutcomeFailed, Ended: now, Error: "bulk"})
	}
	fs = append(fs, driver.Failure{Task: "other", Entity: "o1", Outcome: driver.OutcomeTimeout, Ended: now.Add(time.Second), Error: "too slow"})
	if err := e.store.Fleet().RecordFailures(ctx, fs, keep); err != nil {
		t.Fatal(err)
	}
	all, err := e.store.Fleet().Failures(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "the prefix's list keeps the newest", len(all), driver.DefaultHistory().Failures)
	expect.Equal(t, "newest first", all[0].Entity, "o1")
	_, body := e.do("GET", "/failures", "", nil, nil)
	expect.True(t, "the other task's failure is shown", strings.Contains(body, `href="/tasks/other/entity?id=o1"`))
	expect.True(t, "the bulk task's newest is shown", strings.Contains(body, `href="/tasks/bulk/entity?id=b199"`))
	expect.True(t, "its oldest is not", !strings.Contains(body, `id=b0"`))
}
