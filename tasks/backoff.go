package tasks

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrBackoff is matched (errors.Is) by a *BackoffError.
var ErrBackoff = errors.New("tasks: the API asked to back off")

// BackoffError says a run's API answered "slow down until then": an HTTP
// 429 or 503, or an exec action's BackoffExitCode. The run is not a
// failure: the scheduler closes the task's limits for After (bounded by
// each one's max_backoff) and runs it again after.
type BackoffError struct {
	After  time.Duration // 0: the answer gave no time (DefaultBackoff)
	Reason string        // what the API said, for status and logs
}

func (e *BackoffError) Error() string {
	return fmt.Sprintf("back off for %v: %s", e.After, e.Reason)
}

// Is makes errors.Is(err, ErrBackoff) true.
func (e *BackoffError) Is(target error) bool { return target == ErrBackoff }

// DefaultBackoff is how long a back-off lasts when the answer gives no
// time.
const DefaultBackoff = 5 * time.Second

// BackoffExitCode is the exit status by which an exec action says "the API
// asked me to back off"; a stdout line "retry-after: N" (seconds, or an
// HTTP date) says for how long.
const BackoffExitCode = 76

// backoffOf reads an HTTP answer's back-off: Retry-After (seconds or a
// date), else RateLimit-Reset (seconds), else X-RateLimit-Reset (seconds,
// or a Unix time when it is one).
func backoffOf(resp *http.Response, now time.Time) *BackoffError {
	h := resp.Header
	// The status line is the API's text, as long and as hostile as it
	// likes: the reason is stored (the limit's, on every replica) and
	// shown on terminals and pages, so it is cut and made printable here.
	be := &BackoffError{Reason: printable(resp.Status, maxReason)}
	for _, name := range []string{"Retry-After", "RateLimit-Reset", "X-RateLimit-Reset"} {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		if d, ok := parseAfter(v, now); ok {
			be.After = d
			be.Reason += ", " + name + ": " + v
			break
		}
	}
	return be
}

// maxReason bounds the text a back-off keeps of its answer.
const maxReason = 200

// printable is s cut to at most max bytes (never inside a character), with
// every character that is not printable (control characters such as ESC,
// bidirectional overrides such as U+202E, invalid bytes) written as Go
// writes it in a quoted string: text from outside the process shown on a
// terminal cannot move its cursor, set its title or reverse the words.
func printable(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	for _, r := range s {
		w := string(r)
		if !unicode.IsPrint(r) {
			q := strconv.QuoteRune(r)
			w = q[1 : len(q)-1]
		}
		if b.Len()+len(w) > max {
			break
		}
		b.WriteString(w)
	}
	return b.String()
}

// parseAfter reads seconds, a Unix time (after 2001), or an HTTP date, as
// a time from now.
func parseAfter(v string, now time.Time) (time.Duration, bool) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		if n > 1_000_000_000 {
			return max(0, time.Unix(n, 0).Sub(now)), true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// retryAfterLine finds the last "retry-after: V" line of output.
func retryAfterLine(output string, now time.Time) (time.Duration, string) {
	var d time.Duration
	var said string
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "retry-after") {
			continue
		}
		if a, ok := parseAfter(strings.TrimSpace(v), now); ok {
			d, said = a, strings.TrimSpace(sc.Text())
		}
	}
	return d, said
}

// lastBytes is the end of s, at most n bytes, from a rune's start.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
