package console

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/stores"
)

// writeUsers writes the htpasswd file users (name to password) make.
func writeUsers(t *testing.T, path string, users map[string]string) {
	t.Helper()
	var lines []string
	for u, pw := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, u+":"+string(h))
	}
	tmp := path + ".new" // replaced by a rename, as htpasswd and editors do
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// status is the code the console answers user with password for GET /.
func status(t *testing.T, srv string, user, password string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", srv+"/", nil)
	req.SetBasicAuth(user, password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestUsersReloaded: a user removed from the htpasswd file, or whose
// password changed, is refused once the file changes (no restart, no
// signal); SIGHUP's Reload takes new admins; a file that cannot be read
// keeps the users it would replace. Before, the users were read at start
// only: a removed user kept working until a restart.
func TestUsersReloaded(t *testing.T) {
	e := newEnv(t, true)
	pw := e.web.HtpasswdFile
	expect.Equal(t, "view before", status(t, e.srv.URL, "view", "pw-view"), http.StatusOK)
	writeUsers(t, pw, map[string]string{"ops": "new-pw"})
	expect.WaitFor(t, 3*fileCheck, "the removed user refused", func() bool {
		return status(t, e.srv.URL, "view", "pw-view") == http.StatusUnauthorized
	})
	expect.Equal(t, "ops's old password", status(t, e.srv.URL, "ops", "pw-ops"), http.StatusUnauthorized)
	expect.Equal(t, "ops's new password", status(t, e.srv.URL, "ops", "new-pw"), http.StatusOK)

	// Reload (SIGHUP) reads the admins again: view is back, as an admin.
	writeUsers(t, pw, map[string]string{"ops": "new-pw", "view": "pw-view"})
	w := *e.web
	w.Admins = []string{"ops", "view"}
	if err := e.front.Reload(&w); err != nil {
		t.Fatal(err)
	}
	resp, _ := e.do("POST", "/tasks/sync/resume", "view", url.Values{}, nil)
	expect.Equal(t, "view, made an admin by the reload, resumes", resp.StatusCode, http.StatusSeeOther)

	// A broken file keeps the users.
	if err := os.WriteFile(pw, []byte("ops:not-a-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expect.True(t, "Reload of a broken file fails", e.front.Reload(&w) != nil)
	expect.Equal(t, "ops after a broken file", status(t, e.srv.URL, "ops", "new-pw"), http.StatusOK)
}

// TestOriginSchemeChecked: a POST whose Origin is this host over HTTPS,
// sent to the console over plain HTTP without Sec-Fetch-Site, is refused;
// http.CrossOriginProtection alone compares hosts only. A browser's
// Sec-Fetch-Site is trusted as it is, and a trusted proxy's
// X-Forwarded-Proto says the scheme the client used.
func TestOriginSchemeChecked(t *testing.T) {
	e := newEnv(t, true)
	host := strings.TrimPrefix(e.srv.URL, "http://")
	post := func(hdr map[string]string) int {
		resp, _ := e.do("POST", "/tasks/sync/resume", "ops", url.Values{}, hdr)
		return resp.StatusCode
	}
	expect.Equal(t, "Origin https://same-host over HTTP", post(map[string]string{"Origin": "https://" + host}), http.StatusForbidden)
	expect.Equal(t, "Origin http://same-host", post(map[string]string{"Origin": "http://" + host}), http.StatusSeeOther)
	expect.Equal(t, "a browser's Sec-Fetch-Site: same-origin", post(map[string]string{"Origin": "https://" + host, "Sec-Fetch-Site": "same-origin"}), http.StatusSeeOther)
	e.con.proxies = parseProxies([]string{"127.0.0.1/32"}) // [web] trusted_proxies
	expect.Equal(t, "behind a TLS proxy that says so", post(map[string]string{"Origin": "https://" + host, "X-Forwarded-Proto": "https"}), http.StatusSeeOther)
}

// links finds every URL a page points at: links, forms, assets.
var links = regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)

// TestMountedUnderAPrefix: with Prefix /tickd, mounted on a mux beside
// other routes, every link, form, asset and redirect of every page stays
// under /tickd and answers; nothing reaches the mux's other routes.
// Before, 43 absolute URLs led out of the prefix.
func TestMountedUnderAPrefix(t *testing.T) {
	e := newEnv(t, false)
	con, err := New(Options{Config: e.con.cfg(), Store: e.store, Prefix: "/tickd"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tickd/", Anyone(con, Admin))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s %s reached the mux's root, outside the prefix", r.Method, r.URL)
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(p string) (int, string) {
		resp, err := client.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	seen := map[string]bool{}
	queue := []string{"/tickd/"}
	for _, p := range pages {
		queue = append(queue, "/tickd"+p)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		code, body := get(p)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", p, code)
			continue
		}
		for _, m := range links.FindAllStringSubmatch(body, -1) {
			u := html.UnescapeString(m[1])
			if strings.HasPrefix(u, "?") || strings.HasPrefix(u, "#") {
				continue // the same page
			}
			if !strings.HasPrefix(u, "/tickd/") {
				t.Errorf("%s links to %q, outside /tickd/", p, u)
				continue
			}
			if !strings.Contains(u, "/trigger") && !strings.Contains(u, "/pause") && !strings.Contains(u, "/resume") && !strings.Contains(u, "/unlock") {
				queue = append(queue, u)
			}
		}
	}
	expect.True(t, "pages walked", len(seen) >= len(pages))
	for p, form := range actions {
		req, _ := http.NewRequest("POST", srv.URL+"/tickd"+p, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/tickd/") {
			t.Errorf("POST %s: %d to %q, want a redirect under /tickd/", p, resp.StatusCode, loc)
		}
	}
	if _, err := New(Options{Config: e.con.cfg(), Store: e.store, Prefix: "/tickd/"}); err == nil {
		t.Error("a prefix ending in / was taken")
	}
}

// ExampleNew mounts the console under /tickd on a program's own mux,
// behind the program's own sign-on, which says who the user is.
func ExampleNew() {
	cfg, err := config.Parse("app.toml", []byte(`
[[tasks]]
name = "sync"
every = "15m"
command = ["true"]
`))
	if err != nil {
		panic(err)
	}
	store := stores.Memory(lease.Options{Replica: "app"})
	defer store.Stop(context.Background())
	con, err := New(Options{Config: cfg, Store: store, Prefix: "/tickd"})
	if err != nil {
		panic(err)
	}
	// The program's sign-on: here, a header its proxy sets.
	sso := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := r.Header.Get("X-Signed-In-As")
			if name == "" {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			role := Viewer
			if name == "ops" {
				role = Admin
			}
			next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), User{Name: name, Role: role})))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/tickd/", sso(con))

	req := httptest.NewRequest("GET", "/tickd/", nil)
	req.Header.Set("X-Signed-In-As", "ops")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `href="/tickd/tasks/sync"`))
	// Output: 200 true
}

// TestNoActionWithoutAnIdentity: a console without users (a loopback
// address, no htpasswd_file) shows every page but refuses every action:
// every account of the host reaches a loopback address (the review paused,
// triggered and force-unlocked as nobody). insecure_local_admin = true
// makes anyone who reaches it an admin, as before.
func TestNoActionWithoutAnIdentity(t *testing.T) {
	e := newEnv(t, false)
	for _, p := range []string{"/", "/tasks/sync"} {
		resp, _ := e.do("GET", p, "", nil, nil)
		expect.Equal(t, "a page without users: "+p, resp.StatusCode, http.StatusOK)
	}
	for path, form := range actions {
		resp, _ := e.do("POST", path, "", form, nil)
		expect.Equal(t, "an action without an identity: "+path, resp.StatusCode, http.StatusForbidden)
	}
	_, page := e.do("GET", "/tasks/sync", "", nil, nil)
	expect.True(t, "no action's form on a read-only page", !strings.Contains(page, `action="/tasks/sync/pause"`))
	e.rewire(func(w *config.Web) { w.InsecureLocalAdmin = true }, Limits{})
	resp, _ := e.do("POST", "/tasks/sync/resume", "", url.Values{}, nil)
	expect.Equal(t, "with insecure_local_admin, an action", resp.StatusCode, http.StatusSeeOther)
}

// TestConsoleAloneShowsNothing: a program that mounts the console alone,
// choosing no authentication, shows nothing (403 saying what to choose);
// Anyone spells "no authentication" out. Before, the console alone showed
// every page to anyone, since its users moved to Front.
func TestConsoleAloneShowsNothing(t *testing.T) {
	e := newEnv(t, false)
	alone := httptest.NewServer(e.con)
	t.Cleanup(alone.Close)
	resp, err := http.Get(alone.URL + "/tasks/sync")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	expect.Equal(t, "the console alone", resp.StatusCode, http.StatusForbidden)
	expect.True(t, "it says what to choose: "+string(body), strings.Contains(string(body), "tickd.WithUser") && !strings.Contains(string(body), "console.") && !strings.Contains(string(body), "sync"))
	open := httptest.NewServer(Anyone(e.con, Viewer))
	t.Cleanup(open.Close)
	resp, err = http.Get(open.URL + "/tasks/sync")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expect.Equal(t, "behind Anyone", resp.StatusCode, http.StatusOK)
}
