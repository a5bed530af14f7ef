// Package console is tickd's web console (docs/console.md): what each task
// is doing and did, and the operator's actions, for the people who run a
// fleet. `tickd run` serves it when the config has a [web] table, `tickd
// web` serves it alone, and a Go program mounts it as an http.Handler (New),
// under a path of its choosing (Options.Prefix).
//
// Pages are rendered on the server (html/template, which escapes every task
// name, entity id and error) and work without JavaScript; a small script of
// the console's own (no inline script: the Content-Security-Policy forbids
// it) refreshes the page every few seconds, pausably, and shows times in
// the viewer's zone. State changes are POST only, for admins only, behind
// http.CrossOriginProtection.
//
// Who the viewer is comes from in front, as middleware: Front, which tickd
// run and tickd web use, checks the users of an htpasswd file (htpasswd -B;
// Auth) or, without one (allowed on loopback only), makes every viewer an
// admin; a Go program may put its own sign-on there instead (WithUser).
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/listen"
)

// Options builds a Console.
type Options struct {
	Config *config.Config // its tasks, and its [web] table (may be nil)
	Store  *lease.Store
	Logger *slog.Logger // failed logins, actions; defaults to discarding
	// Refresh is how often the pages refresh themselves. Defaults to
	// [web] refresh, or 5s.
	Refresh time.Duration
	// Prefix is the path the console is served under, "/tickd" say: its
	// pages are then /tickd/, /tickd/tasks/NAME…, and every link, form,
	// asset and redirect stays under it, so that a reverse proxy or a Go
	// program's mux can serve it at a path. The handler expects full paths
	// (mount it at Prefix+"/", without http.StripPrefix). Defaults to [web]
	// base_path, or "" (the root).
	Prefix string
	// Traces says where the ticks' traces go, as the tickd whose console
	// this is says it ("": nowhere, not traced). nil: the config's
	// [telemetry] and this process's OTEL_* variables say (tickd web, a
	// process that traces nothing itself).
	Traces *string
}

// Console is the console's http.Handler: its pages and actions, with the
// security headers and the cross-origin check. Who the viewer is comes
// from the request's context (WithUser): Front puts the [web] table's
// users there, a Go program its own sign-on. A request with no user is a
// viewer.
type Console struct {
	config  atomic.Pointer[config.Config]
	store   *lease.Store
	log     *slog.Logger
	refresh time.Duration
	prefix  string
	proxies proxies // [web] trusted_proxies: their X-Forwarded-Proto is believed
	pages   *template.Template
	h       http.Handler
	flashes flashes  // the messages after actions (flash.go)
	traces  *string  // Options.Traces
	lookups *lookups // the entity page's attributes
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// New builds the console for opts.Config's tasks over opts.Store.
func New(opts Options) (*Console, error) {
	if opts.Config == nil || opts.Store == nil {
		return nil, errors.New("console: a config and a store are needed")
	}
	c := &Console{store: opts.Store, log: opts.Logger, refresh: opts.Refresh, prefix: opts.Prefix, traces: opts.Traces, lookups: newLookups()}
	if w := opts.Config.Web; w != nil {
		c.proxies = parseProxies(w.TrustedProxies)
		if c.prefix == "" {
			c.prefix = w.BasePath
		}
		if c.refresh <= 0 {
			c.refresh = w.Refresh
		}
	}
	if err := listen.CheckBasePath(c.prefix); err != nil {
		return nil, fmt.Errorf("console: prefix %q: %w", c.prefix, err)
	}
	c.config.Store(opts.Config)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.refresh <= 0 {
		c.refresh = 5 * time.Second
	}
	base := template.FuncMap{"base": func() string { return c.prefix }}
	t, err := template.New("").Funcs(funcs).Funcs(base).ParseFS(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	c.pages = t
	c.h = Headers(c.sameScheme(http.NewCrossOriginProtection().Handler(c.routes())))
	return c, nil
}

// ServeHTTP serves a request whose user an authentication in front of
// the console said: NewFront (the [web] table's users), Auth.Wrap, or
// Anyone (no authentication, spelled out). A request none of them saw is
// refused: a program that mounts the console alone shows nothing until it
// chooses who may see it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Context().Value(userKey{}).(User); !ok {
		// Said to whoever mounted it: tickd's own [web] users, or a program's
		// sign-on in front (tickd.WithUser on each request it lets through).
		http.Error(w, "console: no authentication saw this request: [web] users in tickd's config, or the program's own sign-on in front saying who the user is (tickd.WithUser)", http.StatusForbidden)
		return
	}
	c.h.ServeHTTP(w, r)
}

// Reload shows cfg's tasks from now on (the daemon calls it on SIGHUP;
// Front.Reload reads the users again). The rest of the [web] table is
// read by New and Start only.
func (c *Console) Reload(cfg *config.Config) { c.config.Store(cfg) }

func (c *Console) cfg() *config.Config { return c.config.Load() }

// routes maps every page and action, under the prefix. GET routes only
// read; the POST ones are the actions, for admins.
func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	files := http.StripPrefix(c.prefix+"/static/", http.FileServerFS(static))
	p := c.prefix
	mux.Handle("GET "+p+"/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // the files, never a listing of them
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET "+p+"/{$}", c.tasksPage)
	mux.HandleFunc("GET "+p+"/tasks/{task}", c.taskPage)
	mux.HandleFunc("GET "+p+"/tasks/{task}/entity", c.entityPage)
	mux.HandleFunc("GET "+p+"/tasks/{task}/requests/{id}", c.requestPage)
	mux.HandleFunc("GET "+p+"/replicas", c.replicasPage)
	mux.HandleFunc("GET "+p+"/actions", c.actionsPage)
	mux.HandleFunc("GET "+p+"/failures", c.failuresPage)
	mux.HandleFunc("GET "+p+"/api/status", c.statusJSON)
	mux.HandleFunc("GET "+p+"/api/tasks/{task}/history", c.historyJSON)
	mux.HandleFunc("GET "+p+"/api/tasks/{task}/entity", c.entityJSON)
	mux.HandleFunc("POST "+p+"/tasks/{task}/trigger", c.admin(c.trigger))
	mux.HandleFunc("POST "+p+"/tasks/{task}/pause", c.admin(c.pause))
	mux.HandleFunc("POST "+p+"/tasks/{task}/resume", c.admin(c.resume))
	mux.HandleFunc("POST "+p+"/tasks/{task}/unlock", c.admin(c.unlock))
	return mux
}

// url is the console's path p ("/tasks/x"), under the prefix.
func (c *Console) url(p string) string { return c.prefix + p }

// userKey carries the request's user in its context.
type userKey struct{}

// User is who a request acts as: a name (for the records; "" when the
// console has no users) and a role.
type User struct {
	Name string
	Role Role
}

// WithUser returns ctx carrying u, for the Console to act as: what an
// auth put in front of it does (Front's basic auth, or a Go program's own
// sign-on).
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// userOf is r's user; a viewer with no name if nothing in front said who.
func userOf(r *http.Request) User {
	u, _ := r.Context().Value(userKey{}).(User)
	return u
}

// admin lets only admins through to an action.
func (c *Console) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if userOf(r).Role != Admin {
			http.Error(w, "only an admin may do this", http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

// by is who acts, for the actions' records.
func by(r *http.Request) string {
	if u := userOf(r); u.Name != "" {
		return u.Name + " (console)"
	}
	return "console@" + remoteHost(r)
}
