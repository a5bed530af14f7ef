package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/listen"
	"github.com/tickd/tickd/internal/regular"
)

// Limits bound what one client can hold of the console's server, so that
// no one, logged in or not, can hold a connection or a descriptor for free.
type Limits struct {
	ReadTimeout  time.Duration // a whole request, body included
	WriteTimeout time.Duration // a whole response
	IdleTimeout  time.Duration // a keep-alive connection between requests
	MaxBody      int64         // a request body's bytes, read before auth
}

// DefaultLimits are the console's limits unless FrontOptions.Limits says
// otherwise. The number of connections is [web] max_connections.
var DefaultLimits = Limits{ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxBody: 1 << 20}

// orDefault fills l's zero fields from DefaultLimits.
func (l Limits) orDefault() Limits {
	for _, f := range []struct {
		v *time.Duration
		d time.Duration
	}{{&l.ReadTimeout, DefaultLimits.ReadTimeout}, {&l.WriteTimeout, DefaultLimits.WriteTimeout}, {&l.IdleTimeout, DefaultLimits.IdleTimeout}} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultLimits.MaxBody
	}
	return l
}

// FrontOptions builds a Front.
type FrontOptions struct {
	Web    *config.Web  // the [web] table; nil: no users, loopback only
	Logger *slog.Logger // failed logins, users reloaded; defaults to discarding
	Limits Limits       // zero fields take DefaultLimits'
}

// Front is what tickd run and tickd web put in front of a Console, as
// middleware: the body cap, then either the [web] table's users (basic
// auth against the htpasswd file, with the login limiter) or, without
// users, the loopback Host check with every request an admin. A Go program
// may use it too, or put its own sign-on in front of the Console instead
// (WithUser).
type Front struct {
	h      http.Handler
	auth   *Auth // nil: no users
	limits Limits
	web    *config.Web
	log    *slog.Logger

	mu  sync.Mutex
	srv *http.Server // while started
}

// NewFront wraps c as opts.Web says.
func NewFront(c http.Handler, opts FrontOptions) (*Front, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := opts.Web
	if w == nil {
		w = &config.Web{}
	}
	f := &Front{limits: opts.Limits.orDefault(), web: w, log: log}
	var inner http.Handler
	if w.HtpasswdFile != "" {
		a, err := NewAuth(w, log)
		if err != nil {
			return nil, err
		}
		f.auth, inner = a, a.Wrap(c)
	} else {
		// No identity, no action: without users the console only shows,
		// unless the config says every local account is an admin.
		role := Viewer
		if w.InsecureLocalAdmin {
			role = Admin
		}
		inner = LoopbackOnly(Anyone(c, role), w.Hosts)
	}
	f.h = Headers(Capped(inner, f.limits.MaxBody))
	return f, nil
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// Reload reads the users again as w names them (the daemon's SIGHUP); a
// file that cannot be read keeps the users it replaces. Without users at
// start, there are none to reload: adding an htpasswd_file needs a
// restart.
func (f *Front) Reload(w *config.Web) error {
	if f.auth == nil || w == nil {
		return nil
	}
	return f.auth.Reload(w)
}

// Start serves f on the [web] table's listen address (HTTPS with its TLS
// files) until Stop. It refuses an address off loopback without users (the
// config's check says so too: this is the last line). ctx bounds the start
// only. A second Start does nothing.
func (f *Front) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		return nil
	}
	w, log := f.web, f.log
	if f.auth == nil && !listen.Loopback(w.Listen) {
		return fmt.Errorf("web.listen %q is not a loopback address: the console needs htpasswd_file there", w.Listen)
	}
	lim := f.limits
	// Connections beyond the cap wait in the kernel's backlog: they hold no
	// descriptor of tickd's. One client (one address) takes a quarter of
	// them at most, half behind trusted proxies (every user comes through
	// them): one client holding slow connections leaves the rest to others.
	maxConns := w.MaxConnections
	if maxConns <= 0 { // a Web built in code without it
		maxConns = 64
	}
	perClient := max(maxConns/4, 4)
	if len(w.TrustedProxies) > 0 {
		perClient = max(maxConns/2, 4)
	}
	ll := listen.Limits{ReadTimeout: lim.ReadTimeout, WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxConns: maxConns, PerClient: perClient}
	srv := listen.Server(f, ll, log)
	if w.TLSCertFile != "" {
		cert, err := regular.KeyPair(w.TLSCertFile, w.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("web.tls_cert_file: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	capped, err := listen.TCP(ctx, w.Listen, ll)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	srv.ConnState = capped.ConnState
	var ln net.Listener = capped
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	log.Info("console listening", "addr", ln.Addr().String(), "tls", w.TLSCertFile != "", "auth", f.auth != nil, "base_path", w.BasePath)
	f.srv = srv
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at stop
	return nil
}

// Stop stops serving: it closes the listener and waits, until ctx is done,
// for the requests going on; then it closes their connections.
func (f *Front) Stop(ctx context.Context) error {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		return errors.Join(err, srv.Close())
	}
	return nil
}
