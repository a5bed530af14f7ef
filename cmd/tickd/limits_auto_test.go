package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
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

// bucketAPI is an upstream whose rate limit tickd is not told: a token
// bucket of rate L and as many tokens, which answers 429 when it has none.
// With said, every answer carries the IETF fields (draft-11): its policy,
// "default";q=L;w=1, and what is left. A 429 says Retry-After: 1 once
// retryAfter is set.
type bucketAPI struct {
	mu         sync.Mutex
	rate       float64 // L
	tokens     float64
	at         time.Time
	said       bool
	retryAfter bool
	calls      []bucketCall
}

type bucketCall struct {
	at      time.Time
	tooMany bool
}

func (b *bucketAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	now := time.Now()
	b.tokens = math.Min(b.rate, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
	tooMany := b.tokens < 1
	if !tooMany {
		b.tokens--
	}
	b.calls = append(b.calls, bucketCall{now, tooMany})
	if b.said {
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, int(b.rate)))
		w.Header().Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=1`, int(b.tokens)))
	}
	if tooMany && b.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	b.mu.Unlock()
	if tooMany {
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// halve halves L (and the tokens it may hold).
func (b *bucketAPI) halve() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rate /= 2
	b.tokens = math.Min(b.tokens, b.rate)
	b.retryAfter = true
}

func (b *bucketAPI) snapshot() []bucketCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// secondsWith429 counts the seconds of [from, to), from from on, in which
// a call was answered 429.
func secondsWith429(calls []bucketCall, from, to time.Time) int {
	seen := map[int64]bool{}
	for _, c := range calls {
		if c.tooMany && !c.at.Before(from) && c.at.Before(to) {
			seen[int64(c.at.Sub(from)/time.Second)] = true
		}
	}
	return len(seen)
}

// between counts the calls in [from, to), and the 429s of them.
func between(calls []bucketCall, from, to time.Time) (n, tooMany int) {
	for _, c := range calls {
		if !c.at.Before(from) && c.at.Before(to) {
			n++
			if c.tooMany {
				tooMany++
			}
		}
	}
	return n, tooMany
}

// autoAgainst starts three replicas whose task of 4,000 entities calls api
// under a limit of rate = "auto", and waits until the API's first answer.
func autoAgainst(t *testing.T, api *bucketAPI) time.Time {
	srv := redistest.Start(t)
	tickdtest.Binaries(t)
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	ids := make([]string, 4000)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	entities := filepath.Join(dir, "entities")
	tickdtest.WriteFile(t, entities, strings.Join(ids, "\n")+"\n")
	cfg := filepath.Join(dir, "tickd.toml")
	at := time.Now().UTC().Add(5 * time.Second)
	tickdtest.WriteFile(t, cfg, fmt.Sprintf(`
[daemon]
shutdown_timeout = "2s"
log_format = "json"

[redis]
url = %q
key_prefix = "auto"

[[limits]]
name = "api"
rate = "auto"
burst = 5

[[tasks]]
name = "call"
cron = "%d %d %d * * *"
url = %q
lease_ttl = "3s"
concurrency = 16
limits = ["api"]
entities_file = %q
`, srv.URL(), at.Second(), at.Minute(), at.Hour(), hs.URL, entities))
	for _, name := range []string{"A", "B", "C"} {
		tickdtest.Start(t, name, nil, "run", "-config", cfg)
	}
	var first time.Time
	expect.WaitFor(t, 30*time.Second, "the API's first answer", func() bool {
		if calls := api.snapshot(); len(calls) > 0 {
			first = calls[0].at
			return true
		}
		return false
	})
	return first
}

// TestAutoRateFromTheAPIsFields: a limit of rate = "auto", three
// replicas, an API of L = 20 a second that says its policy in the IETF
// fields (draft-11): after its first answer, no call is answered 429 (the
// replicas pace at 95% of what it says); at a halving of L, tickd follows
// within twice its Retry-After (1s): from 2s after it, no 429 and at most
// the new L a second.
func TestAutoRateFromTheAPIsFields(t *testing.T) {
	t.Parallel()
	tier.Full(t, "three replicas for 40 seconds")
	api := &bucketAPI{rate: 20, tokens: 20, at: time.Now(), said: true}
	first := autoAgainst(t, api)
	halved := first.Add(20 * time.Second)
	expect.WaitFor(t, 30*time.Second, "20s of calls", func() bool { return time.Now().After(halved) })
	api.halve()
	expect.WaitFor(t, 30*time.Second, "15s of calls after the halving", func() bool { return time.Now().After(halved.Add(15 * time.Second)) })
	calls := api.snapshot()
	n, tooMany := between(calls, first.Add(time.Nanosecond), halved)
	steady, _ := between(calls, first.Add(10*time.Second), halved)
	t.Logf("before the halving: %d calls in %v, %d answered 429; %d in its last 10s", n, halved.Sub(first), tooMany, steady)
	expect.Equal(t, "429s after the first answer", tooMany, 0)
	expect.True(t, fmt.Sprintf("most of L once the line is told the rate: %d calls in 10s", steady), float64(steady) >= 0.8*20*10)
	after, tooManyAfter := between(calls, halved.Add(2*time.Second), halved.Add(12*time.Second))
	_, atHalving := between(calls, halved, halved.Add(2*time.Second))
	t.Logf("after the halving: %d calls in the 10s from 2s after it, %d answered 429 (%d in the 2s before)", after, tooManyAfter, atHalving)
	expect.Equal(t, "429s from twice Retry-After after the halving", tooManyAfter, 0)
	expect.True(t, fmt.Sprintf("at most the new L: %d calls in 10s", after), after <= 10*10+2)
}

// TestAutoRateWithoutFields: the same API saying nothing of its rate:
// tickd learns it from its 429s (doubling until the first, then a little
// more a second, a fifth less at a 429): from 60s after the first answer,
// at least 80% of L, and 429s in at most 5 of those 20 seconds (96-100%
// of L and 0-4 429s measured on an idle machine; on a loaded one, 84.5%:
// the replicas' calls, delayed, came in bursts that drew four 429s in
// 10s, and the cuts that answer 429s coming on after a cut took the rate
// down to 2.6 a second for 5s before it climbed back; 90% failed there).
// Seconds, not a share of the calls: the learner rides the knee (it
// probes past it until a 429, and its knee sits a little above L, the
// bucket's tokens absorbing a burst), so the bucket is nearly empty and
// calls that a loaded machine delays and lets go together draw 429s in a
// bunch: 4 of 384 and 30 of 414 calls, each time all within one 5s, in
// CI runs here that a bound of 1% and then 2% failed. A limiter that never
// learned, 10% over L, draws a 429 in nearly every second once its
// bucket is empty (10s at most); at a halving
// of L (its 429s then say Retry-After: 1), over the 20s from 2s after it,
// between 70% and 100% of the new L a second, at most 5% of the calls
// answered 429 (3% measured: they come as the rate rises back towards the
// knee the halving found, until a 429 finds the new one; 20s rather than
// 10, where one 429 more or less was a whole percent of the calls), and
// at most what the API can take in those 20s, the new L a second and the
// 10 tokens its bucket may hold when they begin, and the 5% of 429s: CI
// measured 205 calls against a bound of 202 that left the bucket's tokens
// out).
func TestAutoRateWithoutFields(t *testing.T) {
	t.Parallel()
	tier.Full(t, "three replicas for 110 seconds")
	api := &bucketAPI{rate: 20, tokens: 20, at: time.Now()}
	first := autoAgainst(t, api)
	from, halved := first.Add(60*time.Second), first.Add(80*time.Second)
	expect.WaitFor(t, 100*time.Second, "80s of calls", func() bool { return time.Now().After(halved) })
	api.halve()
	expect.WaitFor(t, 40*time.Second, "25s of calls after the halving", func() bool { return time.Now().After(halved.Add(25 * time.Second)) })
	calls := api.snapshot()
	var perSecond []string
	for s := first; s.Before(halved.Add(25 * time.Second)); s = s.Add(5 * time.Second) {
		n, tm := between(calls, s, s.Add(5*time.Second))
		perSecond = append(perSecond, fmt.Sprintf("%.1f/%d", float64(n-tm)/5, tm))
	}
	t.Logf("every 5s from the first answer (answered 200 a second/429s): %s", strings.Join(perSecond, " "))
	if testing.Verbose() { // around each 429: the calls of the second before it, by 100ms
		for i, c := range calls {
			if c.tooMany && c.at.After(from) && (i == 0 || !calls[i-1].tooMany) {
				var by []string
				for s := c.at.Add(-time.Second); s.Before(c.at); s = s.Add(100 * time.Millisecond) {
					n, _ := between(calls, s, s.Add(100*time.Millisecond))
					by = append(by, fmt.Sprint(n))
				}
				t.Logf("429 at %v: %s", c.at.Sub(first).Round(time.Millisecond), strings.Join(by, " "))
			}
		}
	}
	n, tooMany := between(calls, from, halved)
	expect.True(t, fmt.Sprintf("at least 80%% of L from 60s: %.1f a second", float64(n-tooMany)/20), float64(n-tooMany) >= 0.8*20*20)
	seconds := secondsWith429(calls, from, halved)
	expect.True(t, fmt.Sprintf("at most 5 of the 20 seconds from 60s with a 429: %d (%d 429s of %d calls)", seconds, tooMany, n), seconds <= 5)
	after, tooManyAfter := between(calls, halved.Add(2*time.Second), halved.Add(22*time.Second))
	expect.True(t, fmt.Sprintf("at most the new L from 2s after the halving: %d calls in 20s", after), float64(after) <= 1.05*(10*20+10))
	expect.True(t, fmt.Sprintf("most of the new L from 2s after the halving: %d calls in 20s", after), after >= 7*20)
	expect.True(t, fmt.Sprintf("at most 5%% of 429s from 2s after the halving: %d of %d", tooManyAfter, after), tooManyAfter*100 <= 5*after)
}
