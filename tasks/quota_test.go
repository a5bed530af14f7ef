package tasks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestQuotaOf: the rate-limit fields an answer may carry, as a limit with
// rate = "auto" reads them: the IETF fields (draft-11; the most
// restrictive policy, what is left and its partition), the older
// X-RateLimit-* (what is left over the time left; a Unix time), a 429 that
// says nothing more, none at all, and a hostile field made printable.
func TestQuotaOf(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name   string
		h      map[string]string
		status int
		ok     bool
		rate   float64
		left   int
		reset  time.Duration
		pk     string
		source string
	}{
		{"draft-11", map[string]string{"RateLimit-Policy": `"burst";q=100;w=60, "daily";q=1000;w=86400`, "RateLimit": `"burst";r=50;t=30;pk=:dXNlcjEyMw==:`}, 200,
			true, 1000.0 / 86400, 50, 30 * time.Second, "dXNlcjEyMw==", `RateLimit-Policy "daily";q=1000;w=86400`},
		{"draft-11 alone", map[string]string{"RateLimit-Policy": `"default";q=20;w=1`}, 200, true, 20, -1, 0, "", `RateLimit-Policy "default";q=20;w=1`},
		{"x-ratelimit", map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "120", "X-RateLimit-Reset": "60"}, 200,
			true, 2, 120, time.Minute, "", "X-RateLimit-Limit 5000, X-RateLimit-Remaining 120, X-RateLimit-Reset 60"},
		{"x-ratelimit, a Unix time", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000030"}, 200,
			true, 0, 0, 30 * time.Second, "", "X-RateLimit-Remaining 0, X-RateLimit-Reset 1800000030"},
		{"a bare 429", nil, 429, true, 0, -1, 0, "", ""},
		{"nothing", nil, 200, false, 0, -1, 0, "", ""},
		{"hostile", map[string]string{"RateLimit-Policy": "\"x\x1b[2J\";q=10;w=1"}, 200, true, 10, -1, 0, "", `RateLimit-Policy "x\x1b[2J";q=10;w=1`},
	} {
		h := http.Header{}
		for k, v := range c.h {
			h.Set(k, v)
		}
		q, ok := QuotaOf(h, c.status, now)
		if ok != c.ok || q.Rate != c.rate || q.Remaining != c.left || q.Reset != c.reset || q.Partition != c.pk || q.Source != c.source || q.TooMany != (c.status == 429) {
			t.Errorf("%s: %+v, %v", c.name, q, ok)
		}
	}
}

// TestQuotaReported: an HTTP action tells Run.Quota what each answer said,
// a 429 too; an exec action what its output printed (curl -D -'s head).
func TestQuotaReported(t *testing.T) {
	t.Parallel()
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"default";q=20;w=1`)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	var got []Quota
	run := Run{Task: "t", Entity: "e", Quota: func(q Quota) { got = append(got, q) }}
	if _, err := (HTTP{URL: srv.URL}).Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	status = http.StatusTooManyRequests
	HTTP{URL: srv.URL}.Do(context.Background(), run) //nolint:errcheck // a back-off
	if len(got) != 2 || got[0].Rate != 20 || got[0].TooMany || !got[1].TooMany {
		t.Fatalf("the HTTP action told %+v", got)
	}
	got = nil
	out := "HTTP/1.1 200 OK\r\nRateLimit-Policy: \"default\";q=100;w=60\r\nratelimit: \"default\";r=7;t=12\r\n\r\n{}"
	if _, err := (Exec{Argv: []string{"printf", strings.ReplaceAll(out, "%", "%%")}}).Do(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rate != 100.0/60 || got[0].Remaining != 7 || got[0].Reset != 12*time.Second {
		t.Fatalf("the exec action told %+v", got)
	}
}
