package tasks

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Quota is what one answer of a run's API said of its rate limit: the
// rate its policy allows, what is left of it and until when, whether the
// answer was "too many" (429 or 503), and the fields that said so. A limit
// with rate = "auto" paces to it (Run.Quota).
type Quota struct {
	// Rate is the starts a second the policy allows (the most restrictive
	// of RateLimit-Policy's quota over window), or what is left over the
	// time left (X-RateLimit-Remaining over -Reset); 0: not said.
	Rate float64
	// Remaining is what is left of the quota (-1: not said), whole again
	// after Reset (0: not said).
	Remaining int
	Reset     time.Duration
	// TooMany: the answer was a 429 or a 503.
	TooMany bool
	// Partition is RateLimit's partition key (pk), when it gives one.
	Partition string
	// Source is the fields that said it, printable and short:
	// `RateLimit-Policy "burst";q=100;w=60`.
	Source string
}

// quotaHeaders are the fields QuotaOf reads, as an exec action prints them.
var quotaHeaders = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// QuotaOf reads an answer's rate-limit fields: the IETF RateLimit-Policy
// and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11), else
// X-RateLimit-Limit, -Remaining and -Reset (seconds, or a Unix time). ok is
// false when the answer said nothing of them and was not too many.
func QuotaOf(h http.Header, status int, now time.Time) (q Quota, ok bool) {
	q = Quota{Remaining: -1, TooMany: status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable}
	q.policy(h.Get("RateLimit-Policy"))
	if v := h.Get("RateLimit"); v != "" {
		for _, it := range sfList(v) {
			if r, err := strconv.Atoi(it.params["r"]); err == nil && (q.Remaining < 0 || r < q.Remaining) {
				q.Remaining = r
				if t, err := strconv.ParseFloat(it.params["t"], 64); err == nil && t >= 0 {
					q.Reset = time.Duration(t * float64(time.Second))
				}
				q.Partition = strings.Trim(it.params["pk"], ":")
				if q.Source == "" {
					q.Source = "RateLimit " + it.raw
				}
			}
		}
	}
	if q.Rate == 0 && q.Remaining < 0 {
		q.xRateLimit(h, now)
	}
	q.Source = printable(q.Source, maxReason)
	return q, q.Rate > 0 || q.Remaining >= 0 || q.TooMany
}

// policy reads RateLimit-Policy's items (v) into q: the most restrictive
// quota over window.
func (q *Quota) policy(v string) {
	if v == "" {
		return
	}
	for _, it := range sfList(v) {
		qu, err1 := strconv.ParseFloat(it.params["q"], 64)
		w, err2 := strconv.ParseFloat(it.params["w"], 64)
		if err1 == nil && err2 == nil && qu > 0 && w > 0 && (q.Rate == 0 || qu/w < q.Rate) {
			q.Rate, q.Source = qu/w, "RateLimit-Policy "+it.raw
		}
	}
}

// xRateLimit reads the older X-RateLimit-* fields into q: the rate is what
// is left over the time left.
func (q *Quota) xRateLimit(h http.Header, now time.Time) {
	r, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining")))
	if err != nil || r < 0 {
		return
	}
	q.Remaining = r
	reset := strings.TrimSpace(h.Get("X-RateLimit-Reset"))
	if d, ok := parseAfter(reset, now); ok {
		q.Reset = d
		if r > 0 {
			q.Rate = float64(r) / math.Max(d.Seconds(), 1)
		}
	}
	q.Source = fmt.Sprintf("X-RateLimit-Remaining %d, X-RateLimit-Reset %s", r, reset)
	if l := strings.TrimSpace(h.Get("X-RateLimit-Limit")); l != "" {
		q.Source = "X-RateLimit-Limit " + l + ", " + q.Source
	}
}

// sfItem is an item of a structured field's list (RFC 8941), as
// RateLimit's fields use them: "name";key=value;….
type sfItem struct {
	raw    string
	params map[string]string
}

// sfList splits a structured field's list into its items and their
// parameters, leniently: a field that does not parse gives what it can.
func sfList(v string) []sfItem {
	var out []sfItem
	for _, raw := range splitOutsideQuotes(v, ',') {
		raw = strings.TrimSpace(raw)
		parts := splitOutsideQuotes(raw, ';')
		it := sfItem{raw: raw, params: map[string]string{}}
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			it.params[k] = strings.Trim(val, `"`)
		}
		out = append(out, it)
	}
	return out
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted
// string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, from := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			out = append(out, s[from:i])
			from = i + 1
		}
	}
	return append(out, s[from:])
}

// quotaLines reads an exec action's output for the rate-limit fields it
// printed, one "Name: value" line each (as curl -D - prints an answer's
// head), the last of each name winning.
func quotaLines(output string, tooMany bool, now time.Time) (Quota, bool) {
	h := http.Header{}
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, name := range quotaHeaders {
			if strings.EqualFold(strings.TrimSpace(k), name) {
				h.Set(name, strings.TrimSpace(v))
			}
		}
	}
	status := http.StatusOK
	if tooMany {
		status = http.StatusTooManyRequests
	}
	return QuotaOf(h, status, now)
}
