package console

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/jsoncontract"
	"github.com/tickd/tickd/internal/testkit/stores"
	"github.com/tickd/tickd/lease/driver"
	"golang.org/x/crypto/bcrypt"
)

// hostile is an entity id, and error text, that would break a page that
// did not escape it: markup, quotes, a script, unicode, length.
var hostile = `<script>alert("x")</script>'"><img src=x onerror=alert(1)>&amp;` + "ünï\u202e" + strings.Repeat("長", 300)

// env is a console over an in-process store holding a task whose entities
// include a hostile id, with a failed run whose error and output are
// hostile too.
type env struct {
	t     *testing.T
	store *lease.Store
	web   *config.Web // nil: no [web] table
	con   *Console
	front *Front
	srv   *httptest.Server
}

// users: ops is an admin, view a viewer; both passwords are "pw-" + name.
func newEnv(t *testing.T, withAuth bool) *env {
	t.Helper()
	dir := t.TempDir()
	toml := `
[[limits]]
name = "api"
concurrency = 2
per = "entity"

[[limits]]
name = "fair-api"
concurrency = 1
fair_by = "plan"

[[tasks]]
name = "sync"
every = "15m"
handler = "h"
entities_file = ENTITIES
timezone_from = "tz"
limits = ["api"]
`
	if withAuth {
		var lines []string
		for _, u := range []string{"ops", "view"} {
			h, err := bcrypt.GenerateFromPassword([]byte("pw-"+u), bcrypt.MinCost)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, u+":"+string(h))
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte("# users\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		toml = fmt.Sprintf("[web]\nlisten = \"127.0.0.1:0\"\nhtpasswd_file = %q\nadmins = [\"ops\"]\n", pw) + toml
	}
	// a in Tokyo, with a hostile attribute; b in the task's zone.
	note, _ := json.Marshal(strings.TrimRight(hostile, "長")) // within an attribute's 256 bytes
	entities := filepath.Join(dir, "entities.jsonl")
	if err := os.WriteFile(entities, []byte(`{"id": "a", "tz": "Asia/Tokyo", "note": `+string(note)+"}\n"+`{"id": "b"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toml = strings.Replace(toml, "ENTITIES", strconv.Quote(entities)+"\nentities_format = \"jsonl\"", 1)
	cfg, err := config.Parse("t.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: stores.Memory(lease.Options{Replica: "r1"})}
	t.Cleanup(func() { e.store.Stop(context.Background()) })
	e.seed()
	if e.con, err = New(Options{Config: cfg, Store: e.store}); err != nil {
		t.Fatal(err)
	}
	e.web = cfg.Web
	e.rewire(nil, Limits{})
	return e
}

// rewire serves e's console behind a new Front for e's [web] table as edit
// changes it (edit may be nil), with lim.
func (e *env) rewire(edit func(w *config.Web), lim Limits) {
	e.t.Helper()
	w := config.Web{Listen: "127.0.0.1:0", MaxConnections: 64}
	if e.web != nil {
		w = *e.web
	}
	if edit != nil {
		edit(&w)
	}
	e.web = &w
	f, err := NewFront(e.con, FrontOptions{Web: e.web, Logger: discard(), Limits: lim})
	if err != nil {
		e.t.Fatal(err)
	}
	e.front = f
	if e.srv == nil {
		e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.front.ServeHTTP(w, r) }))
		e.t.Cleanup(e.srv.Close)
	}
}

// seed gives the task a held lease, a failed last run, a tick record, a
// failure and an action, all hostile.
func (e *env) seed() {
	ctx := context.Background()
	// A budget an API closed, for a hostile entity, with a hostile reason.
	if err := e.store.Budgets().Close(ctx, driver.Limit{Name: "api", Concurrency: 2, PerEntity: true}, hostile, time.Hour, "429 "+hostile); err != nil {
		e.t.Fatal(err)
	}
	// A fair limit's one place held, and a run of a hostile group waiting.
	fair := driver.Limit{Name: "fair-api", Concurrency: 1, Burst: 1, Fair: true}
	e.store.SetLimits([]driver.Limit{fair})
	if _, err := e.store.Acquire(ctx, driver.Request{Task: "other", Entity: "b", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"fair-api"}}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Acquire(ctx, driver.Request{Task: "other", Entity: "c", TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"fair-api"},
		Group: hostile, Grouped: true, Weight: 1}); !errors.Is(err, lease.ErrLimited) {
		e.t.Fatalf("a run under a full limit: %v", err)
	}
	tick := time.Now().Add(-time.Minute).Truncate(time.Second)
	l, err := e.store.Acquire(ctx, driver.Request{Task: "sync", Entity: hostile, TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeFailed, Started: tick, Ended: tick, Error: hostile}, nil); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Acquire(ctx, driver.Request{Task: "sync", Entity: "a", TTL: time.Minute, Reason: driver.ReasonTrigger}); err != nil {
		e.t.Fatal(err)
	}
	err = e.store.Fleet().RecordTicks(ctx, []driver.TickWrite{{Task: "sync", Tick: tick, Keep: driver.DefaultHistory(), Part: driver.TickPart{
		Replica: hostile, Final: true, Written: tick, Entities: 2, Started: 1, Outcomes: map[driver.Outcome]int{driver.OutcomeFailed: 1},
		Skipped: map[string]int{}, FirstStart: time.Millisecond, LastEnd: time.Second}}})
	if err != nil {
		e.t.Fatal(err)
	}
	keep := func(string) driver.Retention { return driver.DefaultHistory() }
	if err := e.store.Fleet().RecordFailures(ctx, []driver.Failure{{Task: "sync", Entity: hostile, Tick: tick, Outcome: driver.OutcomeFailed,
		Error: hostile, Output: hostile + "\n"}}, keep); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Fleet().RecordAction(ctx, driver.Action{Task: "sync", At: tick, By: hostile, What: "pause", Reason: hostile}, driver.DefaultHistory()); err != nil {
		e.t.Fatal(err)
	}
}

// do sends a request as user (with its password; "" for none).
func (e *env) do(method, path, user string, form url.Values, hdr map[string]string) (*http.Response, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.SetBasicAuth(user, "pw-"+user)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// pages are every GET route, with the seeded entities.
var pages = []string{"/", "/tasks/sync", "/tasks/sync?q=%3Cscript&mode=substring", "/tasks/sync/entity?id=" + url.QueryEscape(hostile),
	"/tasks/sync/entity?id=a", "/tasks/sync/requests/abc?e=" + url.QueryEscape(hostile), "/replicas", "/actions", "/failures",
	"/api/status", "/api/tasks/sync/history", "/api/tasks/sync/entity?id=a", "/static/app.js", "/static/style.css", "/static/favicon.svg"}

// actions are every POST route, with a valid form.
var actions = map[string]url.Values{
	"/tasks/sync/trigger": {"entities": {"b"}},
	"/tasks/sync/pause":   {"reason": {"test"}, "for": {"1h"}},
	"/tasks/sync/resume":  {},
	"/tasks/sync/unlock":  {"entity": {"a"}, "confirm": {"a"}},
}

// TestEveryRouteIsListed: the routes the tests walk are the console's
// routes, so that a route added later is tried too.
func TestEveryRouteIsListed(t *testing.T) {
	e := newEnv(t, false)
	for _, p := range pages {
		resp, _ := e.do("GET", p, "", nil, nil)
		expect.Equal(t, "GET "+p, resp.StatusCode, http.StatusOK)
	}
	for p := range actions {
		resp, _ := e.do("GET", p, "", nil, nil)
		expect.Equal(t, "GET of the action "+p, resp.StatusCode, http.StatusMethodNotAllowed)
	}
	resp, _ := e.do("GET", "/nothing-here", "", nil, nil)
	expect.Equal(t, "an unknown path", resp.StatusCode, http.StatusNotFound)
}

// state is what an action could change: pauses, pending requests, held
// leases, recorded actions.
func (e *env) state() string {
	ctx := context.Background()
	ps, _ := e.store.Fleet().Pauses(ctx)
	n, _ := e.store.Fleet().DueCount(ctx)
	st, _ := e.store.Fleet().Entity(ctx, "sync", "a")
	as, _ := e.store.Fleet().Actions(ctx, "sync", 100)
	return fmt.Sprintf("pauses %d, due %d, a held %v, actions %d", len(ps), n, st.Held != nil, len(as))
}

// TestNoGETChangesState walks every page, and every action with GET, as
// an admin: nothing changes.
func TestNoGETChangesState(t *testing.T) {
	e := newEnv(t, true)
	before := e.state()
	for _, p := range pages {
		e.do("GET", p, "ops", nil, nil)
	}
	for p, form := range actions {
		e.do("GET", p+"?"+form.Encode(), "ops", nil, nil)
		e.do("HEAD", p+"?"+form.Encode(), "ops", nil, nil)
	}
	expect.Equal(t, "state after every GET", e.state(), before)
}

// TestAuthAndRoles: no credentials or wrong ones get 401 on every route;
// a viewer sees every page and may do no action (403, nothing changed); an
// admin's actions do what the CLI's do, and are recorded with who.
func TestAuthAndRoles(t *testing.T) {
	e := newEnv(t, true)
	for _, p := range append(pages, "/nothing-here") {
		resp, _ := e.do("GET", p, "", nil, nil)
		expect.Equal(t, "no credentials: "+p, resp.StatusCode, http.StatusUnauthorized)
		expect.True(t, "a basic-auth challenge", strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm="))
	}
	resp, _ := e.do("GET", "/", "", nil, map[string]string{"Authorization": "Basic " + basic("ops", "wrong")})
	expect.Equal(t, "a wrong password", resp.StatusCode, http.StatusUnauthorized)
	resp, _ = e.do("GET", "/", "", nil, map[string]string{"Authorization": "Basic " + basic("nobody", "pw-nobody")})
	expect.Equal(t, "an unknown user", resp.StatusCode, http.StatusUnauthorized)
	for _, p := range pages {
		resp, _ := e.do("GET", p, "view", nil, nil)
		expect.Equal(t, "a viewer sees "+p, resp.StatusCode, http.StatusOK)
	}
	before := e.state()
	for p, form := range actions {
		resp, _ := e.do("POST", p, "view", form, nil)
		expect.Equal(t, "a viewer's POST "+p, resp.StatusCode, http.StatusForbidden)
	}
	expect.Equal(t, "state after the viewer's POSTs", e.state(), before)

	resp, _ = e.do("POST", "/tasks/sync/pause", "ops", actions["/tasks/sync/pause"], nil)
	expect.Equal(t, "an admin's pause", resp.StatusCode, http.StatusSeeOther)
	ps, _ := e.store.Fleet().Pauses(context.Background())
	expect.True(t, "paused with its reason, its end and who", ps["sync"].Reason == "test" && ps["sync"].By == "ops (console)" &&
		time.Until(ps["sync"].Until) > 50*time.Minute)
	resp, _ = e.do("POST", "/tasks/sync/unlock", "ops", url.Values{"entity": {"a"}, "confirm": {"b"}}, nil)
	expect.Equal(t, "an unlock whose confirmation differs", resp.StatusCode, http.StatusBadRequest)
	resp, _ = e.do("POST", "/tasks/sync/unlock", "ops", actions["/tasks/sync/unlock"], nil)
	expect.Equal(t, "an admin's unlock", resp.StatusCode, http.StatusSeeOther)
	resp, _ = e.do("POST", "/tasks/sync/trigger", "ops", url.Values{"entities": {"not-listed"}}, nil)
	expect.Equal(t, "a trigger of an entity the task does not list", resp.StatusCode, http.StatusBadRequest)
	resp, _ = e.do("POST", "/tasks/sync/trigger", "ops", actions["/tasks/sync/trigger"], nil)
	expect.Equal(t, "an admin's trigger", resp.StatusCode, http.StatusSeeOther)
	expect.True(t, "a trigger leads to its answers", strings.Contains(resp.Header.Get("Location"), "/tasks/sync/requests/"))
	as, _ := e.store.Fleet().Actions(context.Background(), "sync", 10)
	expect.True(t, "the actions recorded, newest first", len(as) == 4 && as[0].What == "trigger" && as[1].What == "unlock" &&
		as[2].What == "pause" && as[0].By == "ops (console)")
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestFailedLoginsAreLimited: after maxFails failures an address gets 429,
// even with the right password, until the window ends.
func TestFailedLoginsAreLimited(t *testing.T) {
	e := newEnv(t, true)
	wrong := map[string]string{"Authorization": "Basic " + basic("ops", "wrong")}
	for range maxFails {
		resp, _ := e.do("GET", "/", "", nil, wrong)
		expect.Equal(t, "a failed login", resp.StatusCode, http.StatusUnauthorized)
	}
	resp, _ := e.do("GET", "/", "ops", nil, nil)
	expect.Equal(t, "the right password after too many failures", resp.StatusCode, http.StatusTooManyRequests)
	resp, _ = e.do("GET", "/", "view", nil, nil)
	expect.Equal(t, "another user's right password, from the same client", resp.StatusCode, http.StatusOK)
}

// TestLimiterBehindAProxy: behind a trusted proxy, the limiter counts per
// client (X-Forwarded-For) and user, so five bad passwords from one client
// lock out neither the other clients nor the other users; from a peer not
// in trusted_proxies, X-Forwarded-For is not believed.
func TestLimiterBehindAProxy(t *testing.T) {
	e := newEnv(t, true)
	e.rewire(func(w *config.Web) { w.TrustedProxies = []string{"127.0.0.1/32"} }, Limits{})
	from := func(client string, extra map[string]string) map[string]string {
		h := map[string]string{"X-Forwarded-For": client}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	wrong := map[string]string{"Authorization": "Basic " + basic("ops", "wrong")}
	for range maxFails {
		resp, _ := e.do("GET", "/", "", nil, from("10.0.0.1", wrong))
		expect.Equal(t, "a failed login from 10.0.0.1", resp.StatusCode, http.StatusUnauthorized)
	}
	resp, _ := e.do("GET", "/", "ops", nil, from("10.0.0.1", nil))
	expect.Equal(t, "ops from 10.0.0.1, locked out", resp.StatusCode, http.StatusTooManyRequests)
	resp, _ = e.do("GET", "/", "ops", nil, from("10.0.0.2", nil))
	expect.Equal(t, "ops from another client behind the proxy", resp.StatusCode, http.StatusOK)
	resp, _ = e.do("GET", "/", "view", nil, from("10.0.0.1", nil))
	expect.Equal(t, "another user from the locked-out client", resp.StatusCode, http.StatusOK)
	// A forged X-Forwarded-For from a peer that is no trusted proxy counts
	// against the peer itself.
	e.rewire(func(w *config.Web) { w.TrustedProxies = nil }, Limits{})
	for i := range maxFails {
		e.do("GET", "/", "", nil, from(fmt.Sprint("10.1.0.", i), wrong))
	}
	resp, _ = e.do("GET", "/", "ops", nil, from("10.9.9.9", nil))
	expect.Equal(t, "an untrusted peer's X-Forwarded-For is not believed", resp.StatusCode, http.StatusTooManyRequests)
}

// TestCrossOriginPostRefused: an admin's browser tricked into posting from
// another site: 403, nothing changed.
func TestCrossOriginPostRefused(t *testing.T) {
	e := newEnv(t, true)
	before := e.state()
	for p, form := range actions {
		resp, _ := e.do("POST", p, "ops", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
		expect.Equal(t, "a cross-site POST "+p, resp.StatusCode, http.StatusForbidden)
		resp, _ = e.do("POST", p, "ops", form, map[string]string{"Origin": "https://evil.example"})
		expect.Equal(t, "a POST from another origin "+p, resp.StatusCode, http.StatusForbidden)
	}
	expect.Equal(t, "state after the cross-origin POSTs", e.state(), before)
}

// TestSecurityHeaders: every response — page, asset, JSON, 401, 403, 404,
// 405 — carries the CSP and the other headers.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, true)
	check := func(what string, resp *http.Response) {
		t.Helper()
		expect.Equal(t, what+": CSP", resp.Header.Get("Content-Security-Policy"), contentSecurityPolicy)
		expect.Equal(t, what+": nosniff", resp.Header.Get("X-Content-Type-Options"), "nosniff")
		expect.Equal(t, what+": framing", resp.Header.Get("X-Frame-Options"), "DENY")
	}
	for _, p := range pages {
		resp, _ := e.do("GET", p, "ops", nil, nil)
		check(p, resp)
	}
	resp, _ := e.do("GET", "/", "", nil, nil)
	check("401", resp)
	resp, _ = e.do("POST", "/tasks/sync/pause", "view", actions["/tasks/sync/pause"], nil)
	check("403", resp)
	resp, _ = e.do("GET", "/nothing", "ops", nil, nil)
	check("404", resp)
	resp, _ = e.do("GET", "/tasks/sync/pause", "ops", nil, nil)
	check("405", resp)
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "script-src 'self';"} {
		expect.True(t, "the CSP has "+want, strings.Contains(contentSecurityPolicy, want))
	}
	expect.True(t, "no inline script allowed", !strings.Contains(contentSecurityPolicy, "unsafe-inline"))
}

// TestHostileTextIsEscaped: the hostile entity id, error, output, replica
// and reason appear on every page escaped, never as markup; the pages have
// no inline script or style.
func TestHostileTextIsEscaped(t *testing.T) {
	e := newEnv(t, false)
	for _, p := range pages {
		if strings.HasPrefix(p, "/static/") || strings.HasPrefix(p, "/api/") {
			continue
		}
		_, body := e.do("GET", p, "", nil, nil)
		p = p[:min(len(p), 40)]
		expect.True(t, p+": the raw markup is not on the page", !strings.Contains(body, "<script>alert") && !strings.Contains(body, "<img src=x"))
		expect.True(t, p+": one script tag, the console's own", strings.Count(body, "<script") == 1 && strings.Contains(body, `<script src="/static/app.js" defer></script>`))
		expect.True(t, p+": no inline style or event handler in a tag", !inlineAttr.MatchString(body))
		// Outside text (an entity id, a run's error and output, a reason)
		// is shown printable: a bidi override is written as its escape.
		expect.True(t, p+": no raw bidi override", !strings.Contains(body, "\u202e"))
	}
	_, body := e.do("GET", "/", "", nil, nil)
	expect.True(t, "/: a fair limit's hostile group is shown, escaped", strings.Contains(body, `<span class="group">&lt;script&gt;alert(&#34;x&#34;)`))
	for _, p := range []string{"/tasks/sync", "/tasks/sync/entity?id=" + url.QueryEscape(hostile), "/actions"} {
		_, body := e.do("GET", p, "", nil, nil)
		expect.True(t, p[:min(len(p), 40)]+": the hostile text is shown, escaped", strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"))
	}
}

// TestATicksRowSaysWhy: a tick's row gives its reason beside its state
// (history.Why), as tickd history does: the seeded tick's first run
// started 1ms after it.
func TestATicksRowSaysWhy(t *testing.T) {
	e := newEnv(t, false)
	_, body := e.do("GET", "/tasks/sync", "", nil, nil)
	expect.True(t, "the tick's row says why, beside its state", strings.Contains(body, "<td>complete (on time)</td>"))
}

// TestJSONEndpointsKeepTheContract: the console's JSON is the -json
// commands' documents, under the same schema checker.
func TestJSONEndpointsKeepTheContract(t *testing.T) {
	e := newEnv(t, false)
	for _, p := range []string{"/api/status", "/api/status?task=sync", "/api/tasks/sync/history", "/api/tasks/sync/entity?id=a", "/api/tasks/sync/entity?id=" + url.QueryEscape(hostile)} {
		resp, body := e.do("GET", p, "", nil, nil)
		expect.Equal(t, p+" content type", resp.Header.Get("Content-Type"), "application/json")
		for _, msg := range jsoncontract.Errors(body) {
			t.Errorf("%s: %s", p, msg)
		}
	}
	resp, body := e.do("GET", "/api/tasks/nope/history", "", nil, nil)
	expect.True(t, "an error is {\"error\"}", resp.StatusCode == http.StatusNotFound && strings.Contains(body, `"error"`))
}

// TestStartRefusedOffLoopbackWithoutAuth: the console does not listen on
// a public address without users, whatever built its config.
func TestStartRefusedOffLoopbackWithoutAuth(t *testing.T) {
	e := newEnv(t, false)
	if _, err := startFront(e.front, &config.Web{Listen: "0.0.0.0:0"}, discard()); err == nil {
		t.Fatal("started on 0.0.0.0 without auth")
	}
	stop, err := startFront(e.front, &config.Web{Listen: "127.0.0.1:0"}, discard())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := config.Parse("t.toml", []byte("[web]\nlisten = \"0.0.0.0:8080\"\n[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"true\"]\n")); err == nil {
		t.Fatal("a config listening off loopback without htpasswd_file was taken")
	}
}

// inlineAttr finds a style or on… attribute inside a tag.
// (attribute values are skipped: quoted, they are text).
var inlineAttr = regexp.MustCompile(`<[a-zA-Z]+(\s+[a-zA-Z-]+(="[^"]*")?)*\s+(style|on[a-z]+)=`)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startFront serves f on w.Listen until stop is called.
func startFront(f *Front, w *config.Web, log *slog.Logger) (stop func(), err error) {
	f.web, f.log = w, log
	if err := f.Start(context.Background()); err != nil {
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		f.Stop(ctx) //nolint:errcheck // stopping: what is left is closed
	}, nil
}

// TestHTTPS: with tls_cert_file and tls_key_file the console speaks TLS,
// and nothing else.
func TestHTTPS(t *testing.T) {
	e := newEnv(t, false)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)  //nolint:errcheck
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600) //nolint:errcheck
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := startFront(e.front, &config.Web{Listen: addr, TLSCertFile: certFile, TLSKeyFile: keyFile}, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expect.Equal(t, "over HTTPS", resp.StatusCode, http.StatusOK)
	expect.Equal(t, "HSTS over HTTPS", resp.Header.Get("Strict-Transport-Security"), "max-age=31536000")
	if resp, err := http.Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		expect.True(t, "plain HTTP is not served", resp.StatusCode == http.StatusBadRequest)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestTasksPageShowsLimits: the tasks page lists each limit, its runs, what
// it bounds, the tasks that share it, and the budgets an API closed, a
// hostile entity's and reason escaped.
func TestTasksPageShowsLimits(t *testing.T) {
	e := newEnv(t, false)
	_, body := e.do("GET", "/", "", nil, nil)
	for _, want := range []string{"<h2>Limits</h2>", "<td>api</td>", "<td>0/2</td>", "<th>Waiting</th>", `<td class="waiting">0</td>`, "2 at once, per entity", `<a href="/tasks/sync">sync</a>`,
		"429 &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"} {
		expect.True(t, "the tasks page shows "+want, strings.Contains(body, want))
	}
}

// TestTriggerOfABusyEntitySaysSo: the page that watches a trigger's
// answers says of an entity held by another run that it is busy, by whom
// and since when, and that it runs when it is free.
func TestTriggerOfABusyEntitySaysSo(t *testing.T) {
	e := newEnv(t, true)
	// The seed holds a lease of sync/a.
	resp, b := e.do("POST", "/tasks/sync/trigger", "ops", url.Values{"entities": {"a"}}, nil)
	expect.Equal(t, "an admin's trigger: "+b, resp.StatusCode, http.StatusSeeOther)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	_, body := e.do("GET", loc.RequestURI(), "view", nil, nil)
	expect.True(t, "the answers page says a is busy and runs when free:\n"+body,
		strings.Contains(body, "busy (held by ") && strings.Contains(body, "runs when it is free"))
}

// TestFlashComesFromTheServer: the message after an action is the
// server's, shown to the user who acted; a crafted link's ?done= text
// ("Session expired: re-enter your password at evil.example") is never
// shown on a page as the server's own, and another user's message id shows
// nothing.
func TestFlashComesFromTheServer(t *testing.T) {
	e := newEnv(t, true)
	const lure = "Session expired: re-enter your password at evil.example"
	_, body := e.do("GET", "/tasks/sync?done="+url.QueryEscape(lure), "ops", nil, nil)
	expect.True(t, "a link's ?done= text is not shown", !strings.Contains(body, "evil.example"))
	resp, _ := e.do("POST", "/tasks/sync/pause", "ops", url.Values{"reason": {"test"}, "for": {"1h"}}, nil)
	expect.Equal(t, "an admin's pause", resp.StatusCode, http.StatusSeeOther)
	loc := resp.Header.Get("Location")
	_, body = e.do("GET", loc, "ops", nil, nil)
	expect.True(t, "the admin sees the server's message after the pause:\n"+body, strings.Contains(body, `class="flash"`) && strings.Contains(body, "paused sync"))
	_, body = e.do("GET", loc, "view", nil, nil)
	expect.True(t, "another user following the same link sees none", !strings.Contains(body, "paused sync"))
}

// TestPendingRunWaitingForALimitSaysSo: a tick's run waiting for a limit
// shows among the task's pending requests as such, with its tick.
func TestPendingRunWaitingForALimitSaysSo(t *testing.T) {
	e := newEnv(t, false)
	T := time.Date(2026, 1, 1, 9, 15, 0, 0, time.UTC)
	if _, err := e.store.EnqueueWaiting(context.Background(), driver.Due{Task: "sync", Entity: "b", Reason: driver.ReasonTick, Tick: T}, time.Hour); err != nil {
		t.Fatal(err)
	}
	_, body := e.do("GET", "/tasks/sync", "", nil, nil)
	expect.True(t, "the pending run says it waits for a limit, with its tick", strings.Contains(body, `<span class="flag">waits for a limit</span>`) && strings.Contains(body, `datetime="2026-01-01T09:15:00Z"`))
}

// TestTaskPageShowsHeartbeatAndTraces: a task with a heartbeat_url shows
// the monitor's site (never the check's path, its secret) and what each
// tick's end ping says; with tracing on, each tick's trace id, the one
// every replica gives it.
func TestTaskPageShowsHeartbeatAndTraces(t *testing.T) {
	e := newEnv(t, false)
	_, body := e.do("GET", "/tasks/sync", "", nil, nil)
	expect.True(t, "without a heartbeat nor traces, no Ping nor Trace column", !strings.Contains(body, "<th>Ping</th>") && !strings.Contains(body, "<th>Trace</th>"))

	cfg, err := config.Parse("t.toml", []byte(`
[telemetry]
endpoint = "http://user:secret@collector.example:4318"

[[tasks]]
name = "sync"
every = "15m"
handler = "h"
entities = ["a", "b"]
heartbeat_url = "https://hc.example/ping/check-secret-uuid"
`))
	if err != nil {
		t.Fatal(err)
	}
	e.con.Reload(cfg)
	_, body = e.do("GET", "/tasks/sync", "", nil, nil)
	expect.True(t, "the monitor's site is shown, not its check", strings.Contains(body, "pings the check at https://hc.example") && !strings.Contains(body, "check-secret-uuid"))
	expect.True(t, "the collector's site is shown, not its credentials", strings.Contains(body, "sent to http://collector.example:4318") && !strings.Contains(body, "secret@"))
	// The seeded tick is complete, with a failed run: its end ping is a fail.
	expect.True(t, "the tick's end ping", strings.Contains(body, `<td class="ping">fail</td>`))
	recs, err := e.store.Fleet().Ticks(context.Background(), "sync", 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("the seeded tick: %v, %d records", err, len(recs))
	}
	expect.True(t, "the tick's trace id", strings.Contains(body, `<code class="trace">`+telemetry.TickTrace("sync", recs[0].Tick).String()+`</code>`))
}
