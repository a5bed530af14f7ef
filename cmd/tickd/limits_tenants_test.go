package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// tenantServer records each call's entity, tenant and time.
type tenantServer struct {
	mu    sync.Mutex
	calls []tenantCall
	seen  map[string]bool
	twice []string
}

type tenantCall struct {
	entity, tenant string
	at             time.Time
}

func (s *tenantServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Entity     string
		Attributes map[string]string
	}
	json.NewDecoder(r.Body).Decode(&body) //nolint:errcheck // a bad body is an empty entity
	s.mu.Lock()
	// A run that waited for the limit has no attributes (it was not
	// started by the tick's read of the source): the id says the tenant.
	tenant, _, _ := strings.Cut(body.Entity, "-")
	s.calls = append(s.calls, tenantCall{body.Entity, tenant, time.Now()})
	if s.seen[body.Entity] {
		s.twice = append(s.twice, body.Entity)
	}
	s.seen[body.Entity] = true
	s.mu.Unlock()
}

func (s *tenantServer) snapshot() []tenantCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// fairCase is one run of TestFairLimitAcrossTenants.
type fairCase struct {
	big, small, each int     // the big tenant's entities; the small tenants, and each one's
	rate             float64 // the limit's starts a second
	smallFirst       bool    // the small tenants' entities first in the source, else all shuffled
}

// TestFairLimitAcrossTenants: one tenant of 10,000 entities and 100 of 20,
// shuffled in one source, under one limit of R = 20 starts a second
// (burst 5) that is fair_by tenant, three tickd processes, one tick. The
// tick's runs of every small tenant all start while the big tenant gets
// at most
//
//	2n + F × R + 20
//
// starts: F, until every small tenant's runs are read and in line (the
// whole fan-out, here), then G = 101 tenants taking turns, one start each
// a turn, for n = 20 turns (the big tenant's n), with n and 20 more to
// spare. Judged in starts, not seconds, which a loaded machine stretches:
// at R the small tenants' last start comes by F + (G × n) / R, about 110s
// after the tick at this scale on an idle machine (logged). Served oldest
// first, as a limit that is not fair is, the small tenants wait behind
// the whole big one: thousands of its starts, 12,000 / R, about 10 minutes
// (TICKD_TENANTS_LINE=oldest shows it failing). Over windows of five
// turns, one turn apart, from F until a small tenant runs out (every
// tenant waiting all along), Jain's index of the tenants' starts is at
// least 0.95 (20 runs a small tenant, not 10: a fan-out of 8s idle and
// 45s under load had left 2 windows and then none); after the small
// tenants are done, the big one alone gets at least 90% of R (100-101%
// idle, 86.5-94.5% under load), or of what every tenant got in the 10s
// before, where a loaded machine's late asks lose starts. The same holds with the big tenant spread
// over ten times more entity ids (100,000, and 10 runs a small tenant;
// the small tenants first in the source, so that they wait all along
// while the big one's ids are read): its share does not grow. No entity
// runs twice.
//
// TICKD_TENANTS="big small each rate small_first" runs another case
// ("10000 100 20 20 false" is the first, "100000 100 10 20 true" the
// second).
func TestFairLimitAcrossTenants(t *testing.T) {
	t.Parallel()
	tier.Full(t, "three replicas and 12,000 runs, for two minutes")
	cases := []fairCase{{10_000, 100, 20, 20, false}, {100_000, 100, 10, 20, true}}
	if v := os.Getenv("TICKD_TENANTS"); v != "" {
		var c fairCase
		if _, err := fmt.Sscan(v, &c.big, &c.small, &c.each, &c.rate, &c.smallFirst); err != nil {
			t.Fatalf("TICKD_TENANTS=%q: %v", v, err)
		}
		cases = []fairCase{c}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("big=%d", c.big), func(t *testing.T) {
			t.Parallel()
			fairTenants(t, c)
		})
	}
}

func fairTenants(t *testing.T, c fairCase) {
	srv := redistest.Start(t)
	if os.Getenv("TICKD_TENANTS_DEBUG") != "" {
		t.Logf("redis at %s", srv.URL())
	}
	tickdtest.Binaries(t)
	api := &tenantServer{seen: map[string]bool{}}
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	entities := filepath.Join(dir, "entities.jsonl")
	tickdtest.WriteFile(t, entities, tenantSource(c))
	at := time.Now().UTC().Add(8 * time.Second).Truncate(time.Second)
	fairBy := `fair_by = "tenant"`
	if os.Getenv("TICKD_TENANTS_LINE") == "oldest" { // today's line, to show this test failing without fair_by
		fairBy = ""
	}
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
url = %q
key_prefix = "fair"

[[limits]]
name = "api"
rate = "%d/s"
burst = 5
%s

[[tasks]]
name = "call"
cron = "%d %d %d * * *"
url = %q
lease_ttl = "3s"
concurrency = 32
limits = ["api"]
entities_file = %q
entities_format = "jsonl"
`, srv.URL(), int(c.rate), fairBy, at.Second(), at.Minute(), at.Hour(), hs.URL, entities))
	for _, name := range []string{"A", "B", "C"} {
		tickdtest.Start(t, name, nil, "run", "-config", cfg)
	}
	small, total := c.small*c.each, c.big+c.small*c.each
	read := total // read when every small tenant's run is in line
	if c.smallFirst {
		read = small
	}
	var calls []tenantCall
	var inLine, polled time.Time // when every entity was in line or started; the last status read
	expect.WaitFor(t, time.Duration(float64(total)/c.rate*float64(time.Second))+time.Minute, "every small tenant's runs", func() bool {
		calls = api.snapshot()
		if inLine.IsZero() && time.Since(polled) > 100*time.Millisecond {
			if polled = time.Now(); fannedOut(t, cfg, at, read) {
				inLine = polled
				seeGroups(t, cfg, c.small+1)
			}
		}
		n := 0
		for _, x := range calls {
			if x.tenant != "big" {
				n++
			}
		}
		if os.Getenv("TICKD_TENANTS_DEBUG") != "" && time.Since(polled) > 90*time.Millisecond {
			t.Logf("%v after T: %d calls, %d small, in line %v", time.Since(at).Round(time.Millisecond), len(calls), n, !inLine.IsZero())
		}
		return n == small
	})
	lastSmall := time.Time{}
	for _, x := range calls {
		if x.tenant != "big" {
			lastSmall = x.at
		}
	}
	// The big tenant alone, for 10s after.
	alone := lastSmall.Add(time.Second)
	expect.WaitFor(t, time.Minute, "10s of the big tenant alone", func() bool {
		calls = api.snapshot()
		return calls[len(calls)-1].at.After(alone.Add(10 * time.Second))
	})
	if inLine.IsZero() {
		t.Fatal("the line never held every entity")
	}
	fanOut := inLine.Sub(at)
	bound := fanOut + time.Duration(float64(c.small+1)*float64(c.each)/c.rate*float64(time.Second)) + 8*time.Second
	took := lastSmall.Sub(at)
	share := float64(startsIn(calls, alone, alone.Add(10*time.Second))) / (10 * c.rate)
	shared := float64(startsIn(calls, lastSmall.Add(-10*time.Second), lastSmall)) / (10 * c.rate)
	jain, windows := jainOverBacklog(calls, c.each, inLine)
	t.Logf("%d entities in %d tenants at %v/s: the fan-out took %v; the small tenants' last start %v after the tick (bound %v); the big tenant alone: %.1f%% of the rate (every tenant's starts in the 10s before: %.1f%%); Jain's index over %d windows: at least %.3f",
		c.big+small, c.small+1, c.rate, fanOut.Round(time.Millisecond), took.Round(time.Millisecond), bound.Round(time.Millisecond), 100*share, 100*shared, windows, jain)
	// Judged by the starts the big tenant got before the last small one,
	// not by the time that took, which a loaded machine stretches (CI saw
	// 64s against a bound of 60s, 51s on an idle machine): served in turns,
	// it gets one start a turn (each small tenant's c.each turns), and what
	// started before every run was in line; served oldest first, all of
	// its runs read before the small tenants' (thousands).
	bigBefore := bigStartsBefore(calls, lastSmall)
	fair := 2*c.each + int(fanOut.Seconds()*c.rate) + 20
	t.Logf("the big tenant's starts before the small tenants' last: %d (in turns: at most %d); the time it took, against the time at the rate: %v, %v", bigBefore, fair, took.Round(time.Millisecond), bound.Round(time.Millisecond))
	expect.True(t, fmt.Sprintf("the big tenant got at most %d starts before every small tenant's runs had started: %d", fair, bigBefore), bigBefore <= fair)
	// Alone, it gets the whole budget: what a loaded machine's late asks
	// lose (a start not asked for within the burst is lost) is lost in
	// turns as well, so its share is judged against the rate, or against
	// every tenant's starts just before, whichever is lower (CI's load
	// gave 88.5% of the rate; six busy loops here 86.5%).
	expect.True(t, fmt.Sprintf("the big tenant alone gets at least 90%% of the rate, or of every tenant's starts in the 10s before: %.1f%% (%.1f%%)", 100*share, 100*shared), share >= 0.9*min(1, shared))
	expect.True(t, fmt.Sprintf("Jain's index at least 0.95 among the tenants waiting: %.3f over %d windows", jain, windows), jain >= 0.95 && windows > 0)
	api.mu.Lock()
	expect.Equal(t, "entities run twice", len(api.twice), 0)
	api.mu.Unlock()
}

// startsIn counts the calls after from, until to.
func startsIn(calls []tenantCall, from, to time.Time) int {
	n := 0
	for _, x := range calls {
		if x.at.After(from) && !x.at.After(to) {
			n++
		}
	}
	return n
}

// bigStartsBefore counts the big tenant's calls before at.
func bigStartsBefore(calls []tenantCall, at time.Time) int {
	n := 0
	for _, x := range calls {
		if x.tenant == "big" && x.at.Before(at) {
			n++
		}
	}
	return n
}

// seeGroups checks what status says of the limit's groups once every
// run is in line: most of the n tenants wait (the first few turns may have
// served a tenant's runs read so far), none is starved, the longest
// waiting are listed, and the text says so.
func seeGroups(t *testing.T, cfg string, n int) {
	code, out, errs := cli("status", "-config", cfg, "-json", "-limit", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	l := decodeJSON(t, out)["limits"].([]any)[0].(map[string]any)
	waiting, starved, groups := int(l["groups_waiting"].(float64)), int(l["groups_starved"].(float64)), l["groups"].([]any)
	t.Logf("in line: %d tenants waiting, %d starved, %d listed", waiting, starved, len(groups))
	expect.True(t, fmt.Sprintf("most of the %d tenants wait: %d", n, waiting), waiting >= n*9/10)
	expect.Equal(t, "tenants starved", starved, 0)
	expect.Equal(t, "tenants listed", len(groups), 20)
	_, text, _ := cli("status", "-config", cfg, "-limit", "1")
	expect.True(t, "status says the groups:\n"+text, strings.Contains(text, "api's groups: "))
}

// tenantSource is c's entities, one JSON line each: big-NNNNNN of tenant
// big, tNNN-I of tenant tNNN.
func tenantSource(c fairCase) string {
	var lines []string
	for i := range c.big {
		lines = append(lines, fmt.Sprintf(`{"id": "big-%06d", "tenant": "big"}`, i))
	}
	for g := range c.small {
		for i := range c.each {
			lines = append(lines, fmt.Sprintf(`{"id": "t%03d-%d", "tenant": "t%03d"}`, g, i, g))
		}
	}
	if c.smallFirst {
		big := lines[:c.big]
		rand.Shuffle(len(big), func(i, j int) { big[i], big[j] = big[j], big[i] })
		lines = append(lines[c.big:], big...)
	} else {
		rand.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	}
	return strings.Join(lines, "\n") + "\n"
}

// fannedOut says whether the record of the tick at T counts total
// entities read (every one started or in line).
func fannedOut(t *testing.T, cfg string, T time.Time, total int) bool {
	code, out, errs := cli("history", "-config", cfg, "-json", "-limit", "1", "call")
	if code != 0 {
		t.Fatal(errs)
	}
	for _, x := range decodeJSON(t, out)["ticks"].([]any) {
		tk := x.(map[string]any)
		if at, _ := time.Parse(time.RFC3339Nano, tk["tick"].(string)); at.Equal(T) {
			return int(tk["entities"].(float64)) >= total
		}
	}
	return false
}

// jainOverBacklog is the least Jain's index of the tenants' starts over
// windows of five turns (five starts of each tenant), one turn apart, from
// when every run was in line until the first small tenant started its last
// run (every tenant waited all along), and how many windows it judged.
func jainOverBacklog(calls []tenantCall, each int, from time.Time) (float64, int) {
	tenants := map[string]bool{}
	for _, x := range calls {
		tenants[x.tenant] = true
	}
	first, end := -1, -1
	got := map[string]int{}
	for i, x := range calls {
		if first < 0 && !x.at.Before(from) {
			first = i
		}
		if got[x.tenant]++; x.tenant != "big" && got[x.tenant] == each {
			end = i
			break
		}
	}
	turn := len(tenants)
	least, windows := 1.0, 0
	for a := first; a >= 0 && a+5*turn <= end; a += turn {
		share := map[string]float64{}
		for _, x := range calls[a : a+5*turn] {
			share[x.tenant]++
		}
		var sum, sq float64
		for g := range tenants {
			sum += share[g]
			sq += share[g] * share[g]
		}
		least = min(least, sum*sum/(float64(turn)*sq))
		windows++
	}
	return least, windows
}
