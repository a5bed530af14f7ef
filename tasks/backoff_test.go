package tasks

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestHTTPBackoff: a 429 or 503 is a back-off, not a failure, for the time
// its answer gives in any of the headers APIs use.
func TestHTTPBackoff(t *testing.T) {
	now := time.Now()
	cases := []struct {
		status        int
		header, value string
		min, max      time.Duration
	}{
		{429, "Retry-After", "3", 3 * time.Second, 3 * time.Second},
		{503, "Retry-After", now.Add(10 * time.Second).UTC().Format(http.TimeFormat), 8 * time.Second, 10 * time.Second},
		{429, "RateLimit-Reset", "7", 7 * time.Second, 7 * time.Second},
		{429, "X-RateLimit-Reset", strconv.FormatInt(now.Add(20*time.Second).Unix(), 10), 18 * time.Second, 20 * time.Second},
		{429, "", "", 0, 0},
		{429, "Retry-After", "soon", 0, 0},
	}
	for _, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.header != "" {
				w.Header().Set(c.header, c.value)
			}
			w.WriteHeader(c.status)
		}))
		_, err := HTTP{URL: srv.URL}.Do(context.Background(), Run{Task: "t", Entity: "e"})
		srv.Close()
		var be *BackoffError
		if !errors.As(err, &be) || !errors.Is(err, ErrBackoff) {
			t.Fatalf("%d %s: %v, want a back-off", c.status, c.header, err)
		}
		expect.True(t, c.header+" "+c.value+": "+be.After.String(), be.After >= c.min && be.After <= c.max)
	}
}

// TestExecBackoff: exit 76 with a retry-after line is a back-off.
func TestExecBackoff(t *testing.T) {
	_, err := Exec{Argv: []string{"sh", "-c", "echo working; echo 'retry-after: 12'; exit 76"}}.Do(context.Background(), Run{Task: "t", Entity: "e"})
	var be *BackoffError
	if !errors.As(err, &be) {
		t.Fatalf("exit 76: %v, want a back-off", err)
	}
	expect.Equal(t, "back-off", be.After, 12*time.Second)
	expect.Equal(t, "reason", be.Reason, "exit status 76 retry-after: 12")
	_, err = Exec{Argv: []string{"sh", "-c", "exit 76"}}.Do(context.Background(), Run{Task: "t", Entity: "e"})
	if !errors.As(err, &be) || be.After != 0 {
		t.Fatalf("exit 76 without a line: %v, want a back-off of no given time", err)
	}
}

// TestAHostileStatusLineIsCutAndPrintable: a 429 whose status line is
// 20,000 bytes of ESC sequences and U+202E (the review's): the back-off's
// reason, which every replica stores and status prints, is at most
// maxReason bytes with no control or bidirectional character left.
func TestAHostileStatusLineIsCutAndPrintable(t *testing.T) {
	hostile := "429 " + strings.Repeat("\x1b]0;pwned\x07\x1b[2J\u202eevil", 800)
	be := backoffOf(&http.Response{Status: hostile, Header: http.Header{"Retry-After": {"3"}}}, time.Now())
	if len(be.Reason) > maxReason+len(", Retry-After: 3") {
		t.Fatalf("reason of %d bytes", len(be.Reason))
	}
	if strings.ContainsAny(be.Reason, "\x1b\x07\u202e") {
		t.Fatalf("reason keeps a control or bidi character: %q", be.Reason)
	}
	if !strings.HasPrefix(be.Reason, `429 \x1b]0;pwned\a`) {
		t.Fatalf("reason %q: want the status line's start, escaped", be.Reason[:40])
	}
}
