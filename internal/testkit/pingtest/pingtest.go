// Package pingtest is an outside monitor for tests: a ping API
// (Healthchecks.io's) over real HTTP that records every ping it gets, and
// can answer the first ones with failures.
package pingtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Ping is one request the monitor got.
type Ping struct {
	Method string
	Check  string // the path, without the kind's suffix
	Kind   string // "start", "success" or "fail"
	RID    string
	Body   string
	Agent  string // the User-Agent
}

// Monitor is a running ping API.
type Monitor struct {
	URL string // its base URL: a check is URL + "/" + name

	srv  *httptest.Server
	mu   sync.Mutex
	got  []Ping
	fail []int
}

// Start starts a monitor, closed when the test ends. It answers its first
// len(fail) requests with those statuses, the rest with 200 OK.
func Start(t testing.TB, fail ...int) *Monitor {
	m := &Monitor{fail: fail}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

func (m *Monitor) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	p := Ping{Method: r.Method, Check: r.URL.Path, Kind: "success", RID: r.URL.Query().Get("rid"), Body: string(b), Agent: r.UserAgent()}
	for _, k := range []string{"start", "fail"} {
		if c, ok := strings.CutSuffix(p.Check, "/"+k); ok {
			p.Check, p.Kind = c, k
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, p)
	if len(m.fail) > 0 {
		w.WriteHeader(m.fail[0])
		m.fail = m.fail[1:]
		return
	}
	io.WriteString(w, "OK") //nolint:errcheck // the test reads what it got
}

// Pings are the requests the monitor got, in order.
func (m *Monitor) Pings() []Ping {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Ping(nil), m.got...)
}

// Run is what a monitor heard of one run id: its pings by kind, in order.
type Run struct {
	RID    string
	Check  string
	Starts int
	Ends   []Ping // success and fail pings
	// EndFirst: an end came before the run's start.
	EndFirst bool
}

// Runs groups the pings by run id, in the order each id was first heard.
func (m *Monitor) Runs() []*Run {
	var runs []*Run
	by := map[string]*Run{}
	for _, p := range m.Pings() {
		r := by[p.RID]
		if r == nil {
			r = &Run{RID: p.RID, Check: p.Check}
			by[p.RID] = r
			runs = append(runs, r)
		}
		if p.Kind == "start" {
			r.Starts++
			r.EndFirst = r.EndFirst || len(r.Ends) > 0
		} else {
			r.Ends = append(r.Ends, p)
		}
	}
	return runs
}
