package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// limitConfig is three replicas' config: one task of 40 entities whose
// runs take 1s, 2 at once on a replica (so that no one replica can fill a
// limit of 4 alone), under the limit given, with one tick in the next minute, 5s
// from now (after the first start's quarantine).
func limitConfig(redisURL, worker, limit string) string {
	at := time.Now().UTC().Add(5 * time.Second)
	return fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
url = %q
key_prefix = "lim"

[[limits]]
name = "api"
%s

[[tasks]]
name = "sync"
cron = "%d %d %d * * *"
command = [%q, "1s"]
lease_ttl = "3s"
concurrency = 2
limits = ["api"]
entities = %s
`, redisURL, limit, at.Second(), at.Minute(), at.Hour(), worker, entityList(40))
}

// runLimited starts three replicas on cfg, waits until every entity ran
// once, stops them, and returns the runs, each with its start and end.
func runLimited(t *testing.T, limit string) []tickdtest.Run {
	srv := redistest.Start(t)
	_, worker := tickdtest.Binaries(t)
	procs, logPath := startThree(t, limitConfig(srv.URL(), worker, limit))
	var runs []tickdtest.Run
	expect.WaitFor(t, 60*time.Second, "every entity's run ended", func() bool {
		runs = tickdtest.ReadRuns(t, logPath)
		ended := map[string]bool{}
		for _, r := range runs {
			if r.End.At != 0 {
				ended[r.Start.Entity] = true
			}
		}
		return len(ended) == 40
	})
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if c := p.Wait(20 * time.Second); c != 0 {
			t.Fatalf("%s exited %d", p.Name, c)
		}
	}
	runs = tickdtest.ReadRuns(t, logPath)
	expect.Equal(t, "runs (each entity once: one tick)", len(runs), 40)
	return runs
}

// TestLimitConcurrencyAcrossReplicas: three replicas, a limit of 4 at once:
// never more than 4 runs at once across them, by the worker's own start
// and end records, and every entity runs in the tick (none is skipped).
func TestLimitConcurrencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	runs := runLimited(t, "concurrency = 4")
	pids := map[int]bool{}
	for _, r := range runs {
		pids[r.Start.Ppid] = true
	}
	most := mostAtOnce(runs, func(r tickdtest.Run) int64 { return r.End.At }) // every run ended
	t.Logf("at most %d at once, over %d replicas", most, len(pids))
	if most > 4 {
		t.Fatalf("%d runs at once under a limit of 4", most)
	}
	expect.True(t, "the limit was used to the full", most == 4)
	expect.True(t, "more than one replica ran", len(pids) > 1)
}

// TestLimitRateAcrossReplicas: three replicas, 5 starts a second, burst 1:
// no second holds more than 6 starts across them.
func TestLimitRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	runs := runLimited(t, `rate = "5/s"`)
	var starts []int64
	for _, r := range runs {
		starts = append(starts, r.Start.At)
	}
	slices.Sort(starts)
	most := 0
	for i := range starts {
		j := i
		for j < len(starts) && starts[j]-starts[i] < int64(time.Second) {
			j++
		}
		most = max(most, j-i)
	}
	span := time.Duration(starts[len(starts)-1] - starts[0])
	t.Logf("at most %d starts in a second; 40 starts over %v", most, span)
	if most > 6 {
		t.Fatalf("%d starts within one second at 5/s", most)
	}
	expect.True(t, fmt.Sprintf("40 starts at 5/s took %v: about 8s", span), span > 6*time.Second && span < 20*time.Second)
}

// apiServer is a loopback API that answers 429 with Retry-After: 3 to the
// first request of each entity of tooMany, and 200 to the others; it
// records when each request arrived and what it answered.
type apiServer struct {
	mu       sync.Mutex
	tooMany  map[string]bool
	requests []apiRequest
}

type apiRequest struct {
	entity string
	at     time.Time
	status int
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Entity string }
	json.NewDecoder(r.Body).Decode(&body) //nolint:errcheck // a bad body is an empty entity
	a.mu.Lock()
	status := http.StatusOK
	if a.tooMany[body.Entity] {
		delete(a.tooMany, body.Entity)
		status = http.StatusTooManyRequests
	}
	a.requests = append(a.requests, apiRequest{body.Entity, time.Now(), status})
	a.mu.Unlock()
	if status != http.StatusOK {
		w.Header().Set("Retry-After", "3")
	}
	w.WriteHeader(status)
}

func (a *apiServer) snapshot() []apiRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// runAgainstAPI starts three replicas whose task of 12 entities calls api
// under the limit given, and waits until every entity had a 200.
func runAgainstAPI(t *testing.T, api *apiServer, limit string) []apiRequest {
	srv := redistest.Start(t)
	tickdtest.Binaries(t) // built before the tick's time is chosen
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tickd.toml")
	at := time.Now().UTC().Add(5 * time.Second)
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
url = %q
key_prefix = "api"

[[limits]]
name = "api"
%s

[[tasks]]
name = "call"
cron = "%d %d %d * * *"
url = %q
lease_ttl = "3s"
limits = ["api"]
entities = %s
`, srv.URL(), limit, at.Second(), at.Minute(), at.Hour(), hs.URL, entityList(12)))
	for _, name := range []string{"A", "B", "C"} {
		tickdtest.Start(t, name, nil, "run", "-config", cfg)
	}
	var reqs []apiRequest
	expect.WaitFor(t, 60*time.Second, "every entity answered 200", func() bool {
		reqs = api.snapshot()
		ok := map[string]bool{}
		for _, r := range reqs {
			if r.status == http.StatusOK {
				ok[r.entity] = true
			}
		}
		return len(ok) == 12
	})
	return reqs
}

// TestLimitClosedByRetryAfter: an API's 429 with Retry-After: 3 closes its
// limit on every replica: no request reaches the API for 3s, then the runs
// go on, the one answered 429 too (with its tick, not as a failure).
func TestLimitClosedByRetryAfter(t *testing.T) {
	t.Parallel()
	tier.Full(t, "several replicas for over ten seconds")
	api := &apiServer{tooMany: map[string]bool{"u3": true}}
	reqs := runAgainstAPI(t, api, "concurrency = 1") // one request at a time: none in flight at the 429
	var closedAt time.Time
	for _, r := range reqs {
		if r.status == http.StatusTooManyRequests {
			closedAt = r.at
		}
	}
	for _, r := range reqs {
		if r.at.After(closedAt) && r.at.Sub(closedAt) < 3*time.Second {
			t.Fatalf("a request for %s came %v after the 429 with Retry-After: 3", r.entity, r.at.Sub(closedAt))
		}
	}
	last := reqs[len(reqs)-1].at
	t.Logf("429 at +%v of the first request; the next %v after it; the last at +%v",
		closedAt.Sub(reqs[0].at).Round(time.Millisecond), firstAfter(reqs, closedAt).Round(time.Millisecond), last.Sub(reqs[0].at).Round(time.Millisecond))
	expect.Equal(t, "requests (12 answered 200, one 429)", len(reqs), 13)
}

// TestLimitPerEntityBackoff: with per = "entity", one entity's 429 closes
// its own budget only: every other entity's request goes on at once.
func TestLimitPerEntityBackoff(t *testing.T) {
	t.Parallel()
	api := &apiServer{tooMany: map[string]bool{"u3": true}}
	reqs := runAgainstAPI(t, api, "rate = \"100/s\"\nper = \"entity\"")
	var closedAt, retried time.Time
	others := reqs[0].at
	for _, r := range reqs {
		switch {
		case r.entity == "u3" && r.status != http.StatusOK:
			closedAt = r.at
		case r.entity == "u3":
			retried = r.at
		default:
			others = later(others, r.at)
		}
	}
	t.Logf("u3's 429 at +%v, its retry %v after; the other 11 entities' last request at +%v",
		closedAt.Sub(reqs[0].at).Round(time.Millisecond), retried.Sub(closedAt).Round(time.Millisecond), others.Sub(reqs[0].at).Round(time.Millisecond))
	if retried.Sub(closedAt) < 3*time.Second {
		t.Fatalf("u3 was called again %v after its 429 with Retry-After: 3", retried.Sub(closedAt))
	}
	if others.Sub(reqs[0].at) > 2*time.Second {
		t.Fatalf("the other entities waited for u3's back-off: the last came %v after the first", others.Sub(reqs[0].at))
	}
}

// firstAfter is how long after at the first request came.
func firstAfter(reqs []apiRequest, at time.Time) time.Duration {
	for _, r := range reqs {
		if r.at.After(at) {
			return r.at.Sub(at)
		}
	}
	return 0
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestStatusShowsLimits: tickd status says each limit, its runs across the
// replicas and the budgets an API closed, in text and in -json.
func TestStatusShowsLimits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[redis]
url = %q

[[limits]]
name = "shop-token"
concurrency = 2
per = "entity"

[[tasks]]
name = "sync"
every = "1h"
command = ["true"]
limits = ["shop-token"]
entities = ["shop 1", "shop 2"]
`, srv.URL()))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	store, err := stores.Redis(c, "tickd", lease.Options{Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Stop(context.Background()) })
	lim := driver.Limit{Name: "shop-token", Concurrency: 2, PerEntity: true}
	if err := store.Budgets().Close(context.Background(), lim, "shop 1", time.Minute, "429 Too Many Requests <b>"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli("status", "-config", cfg)
	expect.Equal(t, "exit code: "+errs, code, 0)
	expect.True(t, "the text says the limit:\n"+out, strings.Contains(out, "limits (across every replica):") &&
		strings.Contains(out, "shop-token") && strings.Contains(out, "0/2") && strings.Contains(out, "429 Too Many Requests <b>"))
	_, out, _ = cli("status", "-config", cfg, "-json")
	doc := decodeJSON(t, out)
	ls := doc["limits"].([]any)
	l := ls[0].(map[string]any)
	closed := l["closed"].([]any)[0].(map[string]any)
	expect.Equal(t, "closed entity", closed["entity"], any("shop 1"))
	expect.Equal(t, "per", l["per"], any("entity"))
}
