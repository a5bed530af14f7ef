package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tickd/tickd/fence"
	"github.com/tickd/tickd/tickdtype"
)

// RescheduleHeader is the response header by which an HTTP action asks to be
// rescheduled: a 2xx response with "Tickd-Result: reschedule".
const RescheduleHeader = "Tickd-Result"

// HTTP posts a JSON body {task, entity, tick, fence, reason, attempt,
// attributes} to URL, with the run's fence, task and entity in headers as
// well (fence.HeaderFence…: a service refuses a stale run's call with
// fence.Middleware).
// A 2xx response is Done (Reschedule with the RescheduleHeader); a 429 or
// 503 is a *BackoffError (Retry-After, RateLimit-Reset or
// X-RateLimit-Reset say for how long); anything else fails.
type HTTP struct {
	URL     string
	Headers map[string]string // sent with each request, after Content-Type
	Client  *http.Client      // defaults to http.DefaultClient
	// KeepBody, when more than 0, keeps that many bytes of the start of a
	// non-2xx response's body in its error (OutputError).
	KeepBody int
	// Redirects says which redirects are followed: RedirectsNone (the
	// default: a 3xx is the answer, and fails the run) or
	// RedirectsSameOrigin (to the URL's scheme, host and port only). A
	// redirect never carries the body or the headers to another origin.
	// A Client with a CheckRedirect of its own keeps it.
	Redirects string
}

// The redirects an HTTP action follows (HTTP.Redirects, the task's
// follow_redirects).
const (
	RedirectsNone       = "none"
	RedirectsSameOrigin = "same-origin"
)

// ErrRedirect is wrapped by the error of a run whose answer redirected it
// where it does not follow.
var ErrRedirect = errors.New("tasks: redirect not followed")

// client is h's client, with h's redirect rule.
func (h HTTP) client() *http.Client {
	c := http.DefaultClient
	if h.Client != nil {
		c = h.Client
	}
	if c.CheckRedirect != nil {
		return c
	}
	cc := *c
	origin, _ := url.Parse(h.URL)
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		switch {
		case h.Redirects != RedirectsSameOrigin:
			return fmt.Errorf("%w: %s answered a redirect to %s (follow_redirects: none)", ErrRedirect, h.shown(), shownURL(req.URL.String()))
		case origin == nil || req.URL.Scheme != origin.Scheme || req.URL.Host != origin.Host:
			return fmt.Errorf("%w: %s answered a redirect to another origin, %s (follow_redirects: same-origin)", ErrRedirect, h.shown(), shownURL(req.URL.String()))
		case len(via) >= 10:
			return fmt.Errorf("%w: %s: more than 10 redirects", ErrRedirect, h.shown())
		}
		return nil
	}
	return &cc
}

// shown is the action's URL as errors, history, status and the console
// show it (shownURL).
func (h HTTP) shown() string { return shownURL(h.URL) }

// shownURL is a URL as tickd shows it: without its user part (a password
// in it) and with its query's values hidden (a token in one), which stay
// in the config alone.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User = nil
	if u.RawQuery != "" {
		q := u.Query()
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, url.QueryEscape(k)+"=…")
		}
		slices.Sort(keys)
		u.RawQuery = strings.Join(keys, "&")
	}
	return u.String()
}

// ErrStatus is wrapped by the error of a non-2xx response.
var ErrStatus = errors.New("tasks: http status")

// Body is the JSON an HTTP action receives, and "attributes": an object of
// the entity's attributes (Run.Attributes), when it has any.
type Body struct {
	Task    string           `json:"task"`
	Entity  string           `json:"entity"`
	Tick    string           `json:"tick"`
	Fence   int64            `json:"fence"`
	Reason  tickdtype.Reason `json:"reason"`
	Attempt int              `json:"attempt"`
}

// attributedBody is the JSON an HTTP action sends: Body's members, and
// "attributes", the entity's (Run.Attributes), left out when it has none.
type attributedBody struct {
	Body
	Attributes Attributes `json:"attributes,omitempty"`
}

// Do sends the request; ctx bounds it.
func (h HTTP) Do(ctx context.Context, run Run) (Result, error) {
	b := Body{Task: run.Task, Entity: run.Entity, Fence: run.Fence, Reason: run.Reason, Attempt: run.Attempt}
	if !run.Tick.IsZero() {
		b.Tick = run.Tick.UTC().Format(time.RFC3339)
	}
	data, _ := json.Marshal(attributedBody{b, run.Attributes}) // plain struct and strings: never fails
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(data))
	if err != nil {
		return Done, err
	}
	req.Header.Set("Content-Type", "application/json")
	fence.SetHeaders(req.Header, run.Task, run.Entity, run.Fence)
	traceHeaders(ctx, req.Header)
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	c := h.client()
	if err := run.check(); err != nil {
		return Done, err
	}
	resp, err := c.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message holds the whole URL
		}
		return Done, fmt.Errorf("post %s: %w", h.shown(), err)
	}
	defer resp.Body.Close()
	if run.Quota != nil { // every answer: one without a 429 raises a rate learned from 429s
		q, _ := QuotaOf(resp.Header, resp.StatusCode, time.Now())
		run.Quota(q)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck
		be := backoffOf(resp, time.Now())
		be.Reason += " from " + h.shown()
		return Done, be
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("%w %d from %s", ErrStatus, resp.StatusCode, h.shown())
		if h.KeepBody > 0 {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(h.KeepBody))) // what came before an error
			if len(body) > 0 {
				err = &OutputError{Err: err, Output: validText(body)}
			}
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck
		return Done, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) //nolint:errcheck
	if resp.Header.Get(RescheduleHeader) == "reschedule" {
		return Reschedule, nil
	}
	return Done, nil
}

// validText is b as text: a rune cut at its end is left out, other invalid
// bytes become U+FFFD.
func validText(b []byte) string {
	for j := len(b) - 1; j >= max(0, len(b)-utf8.UTFMax); j-- {
		if utf8.RuneStart(b[j]) {
			if !utf8.FullRune(b[j:]) {
				b = b[:j]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
