// Package console is tickd's web console (docs/console.md): what each task
// is doing and did, and the operator's actions, for the people who run a
// fleet. `tickd run` serves it when the config has a [web] table, `tickd
// web` serves it alone, and a Go program mounts it as an http.Handler (New).
//
// Pages are rendered on the server (html/template, which escapes every task
// name, entity id and error) and work without JavaScript; a small script of
// the console's own (no inline script: the Content-Security-Policy forbids
// it) refreshes the page every few seconds, pausably, and shows times in
// the viewer's zone. State changes are POST only, for admins only, behind
// http.CrossOriginProtection. Users and their bcrypt hashes come from an
// htpasswd file (htpasswd -B); without one (allowed on loopback only), the
// viewer is an admin.
package console

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/tickd/tickd/internal/htpasswd"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// Options builds a Console.
type Options struct {
	Config *scheduler.Config // its tasks, and its [web] table (may be nil: no auth)
	Store  *lease.Store
	Logger *slog.Logger // failed logins, actions; defaults to discarding
	// Refresh is how often the pages refresh themselves. Defaults to
	// [web] refresh, or 5s.
	Refresh time.Duration
	// Limits bound what a client may hold (Start's server); zero fields
	// take DefaultLimits'.
	Limits Limits
}

// Limits bound what one client can hold of the console's server, so that
// no one, logged in or not, can hold a connection or a descriptor for free.
type Limits struct {
	ReadTimeout  time.Duration // a whole request, body included
	WriteTimeout time.Duration // a whole response
	IdleTimeout  time.Duration // a keep-alive connection between requests
	MaxBody      int64         // a request body's bytes, read before auth
}

// DefaultLimits are the console's limits unless Options.Limits says
// otherwise. The number of connections is [web] max_connections.
var DefaultLimits = Limits{ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxBody: 1 << 20}

// Console is the console's http.Handler.
type Console struct {
	config  atomic.Pointer[scheduler.Config]
	store   *lease.Store
	log     *slog.Logger
	refresh time.Duration
	limits  Limits
	hosts   map[string]bool // Host names answered without users, besides loopback ones
	proxies []*net.IPNet    // [web] trusted_proxies
	auth    *authenticator  // nil: no users; everyone is an admin
	pages   *template.Template
	h       http.Handler
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// New builds the console for opts.Config's tasks over opts.Store. With an
// htpasswd_file in [web], every request needs a user's credentials.
func New(opts Options) (*Console, error) {
	if opts.Config == nil || opts.Store == nil {
		return nil, errors.New("console: a config and a store are needed")
	}
	c := &Console{store: opts.Store, log: opts.Logger, refresh: opts.Refresh, limits: opts.Limits, hosts: map[string]bool{}}
	for _, f := range []struct {
		v *time.Duration
		d time.Duration
	}{{&c.limits.ReadTimeout, DefaultLimits.ReadTimeout}, {&c.limits.WriteTimeout, DefaultLimits.WriteTimeout}, {&c.limits.IdleTimeout, DefaultLimits.IdleTimeout}} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if c.limits.MaxBody <= 0 {
		c.limits.MaxBody = DefaultLimits.MaxBody
	}
	if w := opts.Config.Web; w != nil {
		for _, h := range w.Hosts {
			c.hosts[strings.ToLower(h)] = true
		}
		for _, p := range w.TrustedProxies {
			if _, n, err := net.ParseCIDR(p); err == nil {
				c.proxies = append(c.proxies, n)
			}
		}
	}
	c.config.Store(opts.Config)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if w := opts.Config.Web; c.refresh <= 0 && w != nil {
		c.refresh = w.Refresh
	}
	if c.refresh <= 0 {
		c.refresh = 5 * time.Second
	}
	if w := opts.Config.Web; w != nil && w.HtpasswdFile != "" {
		us, err := htpasswd.Read(w.HtpasswdFile)
		if err != nil {
			return nil, fmt.Errorf("web.htpasswd_file: %w", err)
		}
		if empty := us.EmptyPasswords(); len(empty) > 0 {
			return nil, fmt.Errorf("web.htpasswd_file: %s: users with an empty password: %s (set one with htpasswd -B -C 10 %s USER)",
				w.HtpasswdFile, strings.Join(empty, ", "), w.HtpasswdFile)
		}
		d, err := decoy(us.Cost())
		if err != nil {
			return nil, err
		}
		admins := map[string]bool{}
		for _, a := range w.Admins {
			if _, ok := us[a]; !ok {
				return nil, fmt.Errorf("web.admins: %q is not a user of %s", a, w.HtpasswdFile)
			}
			admins[a] = true
		}
		c.auth = &authenticator{users: us, decoy: d, admins: admins, fails: &failures{by: map[string]*failCount{}}, good: map[[32]byte]bool{}}
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	c.pages = t
	c.h = secure(c.bounded(c.authenticate(http.NewCrossOriginProtection().Handler(c.routes()))))
	return c, nil
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.h.ServeHTTP(w, r) }

// Reload shows cfg's tasks from now on (the daemon calls it on SIGHUP).
// The users and the [web] table are read by New only.
func (c *Console) Reload(cfg *scheduler.Config) { c.config.Store(cfg) }

func (c *Console) cfg() *scheduler.Config { return c.config.Load() }

// routes maps every page and action. GET routes only read; the POST ones
// are the actions, for admins.
func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // the files, never a listing of them
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /{$}", c.tasksPage)
	mux.HandleFunc("GET /tasks/{task}", c.taskPage)
	mux.HandleFunc("GET /tasks/{task}/entity", c.entityPage)
	mux.HandleFunc("GET /tasks/{task}/requests/{id}", c.requestPage)
	mux.HandleFunc("GET /replicas", c.replicasPage)
	mux.HandleFunc("GET /actions", c.actionsPage)
	mux.HandleFunc("GET /api/status", c.statusJSON)
	mux.HandleFunc("GET /api/tasks/{task}/history", c.historyJSON)
	mux.HandleFunc("POST /tasks/{task}/trigger", c.admin(c.trigger))
	mux.HandleFunc("POST /tasks/{task}/pause", c.admin(c.pause))
	mux.HandleFunc("POST /tasks/{task}/resume", c.admin(c.resume))
	mux.HandleFunc("POST /tasks/{task}/unlock", c.admin(c.unlock))
	return mux
}

// userKey carries the request's user and role in its context.
type userKey struct{}

type user struct {
	name string // "" without auth
	role Role
}

func userOf(r *http.Request) user {
	u, _ := r.Context().Value(userKey{}).(user)
	return u
}

// authenticate lets a request through with its user, or answers 401 (no
// or wrong credentials: a failed login is logged, once a minute per
// address) or 429 (an address that failed too often lately).
func (c *Console) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := user{role: Admin}
		if a := c.auth; a != nil {
			client, now := c.client(r), time.Now()
			given, _, _ := r.BasicAuth()
			key := client + "\x00" + given
			if blocked, refused, log := a.fails.blocked(key, now); blocked {
				if log {
					c.log.Warn("console login refused: too many failures", "user", given, "client", client, "refused", refused)
				}
				http.Error(w, "too many failed logins: try again in a minute", http.StatusTooManyRequests)
				return
			}
			name, role, ok := a.check(r)
			if !ok {
				if _, _, given := r.BasicAuth(); given {
					n := a.fails.failed(key, now)
					c.log.Warn("console login failed", "user", name, "client", client, "failures", n)
				}
				w.Header().Set("WWW-Authenticate", `Basic realm="tickd", charset="UTF-8"`)
				http.Error(w, "log in to see the tickd console", http.StatusUnauthorized)
				return
			}
			u = user{name: name, role: role}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

// admin lets only admins through to an action.
func (c *Console) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if userOf(r).role != Admin {
			http.Error(w, "only an admin may do this (web.admins)", http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

// by is who acts, for the actions' records.
func by(r *http.Request) string {
	if u := userOf(r); u.name != "" {
		return u.name + " (console)"
	}
	return "console@" + remoteHost(r)
}

// Start serves the console on w.Listen (HTTPS with w's TLS files) until
// stop is called. It refuses an address off loopback without users (the
// config's check says so too: this is the last line).
func Start(c *Console, w *scheduler.Web, log *slog.Logger) (stop func(), err error) {
	if c.auth == nil && !scheduler.Loopback(w.Listen) {
		return nil, fmt.Errorf("web.listen %q is not a loopback address: the console needs htpasswd_file there", w.Listen)
	}
	lim := c.limits
	srv := &http.Server{Handler: c, ReadHeaderTimeout: min(10*time.Second, lim.ReadTimeout), ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if w.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(w.TLSCertFile, w.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("web.tls_cert_file: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", w.Listen)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	// Connections beyond the cap wait in the kernel's backlog: they hold no
	// descriptor of tickd's.
	maxConns := w.MaxConnections
	if maxConns <= 0 { // a Web built in code without it
		maxConns = 64
	}
	ln = netutil.LimitListener(ln, maxConns)
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	log.Info("console listening", "addr", ln.Addr().String(), "tls", w.TLSCertFile != "", "auth", c.auth != nil)
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at stop
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx) //nolint:errcheck // stopping: what is left is closed
	}, nil
}
