// Package listen opens the TCP listeners tickd serves HTTP on (the
// console, metrics_addr) with the same protections: timeouts on reading,
// writing and idling, a cap on header bytes, a cap on connections in all and
// per client, and the server's own errors through slog. A client that holds
// idle or slow connections cannot take the descriptors runs need, nor the
// listener from the other clients.
package listen

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what a client may take of a listener.
type Limits struct {
	ReadTimeout  time.Duration // a request, headers and body
	WriteTimeout time.Duration // a response
	IdleTimeout  time.Duration // a keep-alive connection between requests
	MaxConns     int           // connections at once, all clients
	PerClient    int           // connections at once from one address
}

// Server is an http.Server for h with l's timeouts, 64 KiB of headers at
// most, and its errors (a TLS handshake that failed, an accept error)
// logged through log at WARN, not printed to stderr.
func Server(h http.Handler, l Limits, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, l.ReadTimeout), ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// TCP listens on addr with l's connection caps. Past MaxConns, or past
// PerClient from one address, an idle connection (a keep-alive between
// requests, or one that has sent nothing for a second) is closed to make room,
// the oldest first (the client's own, past PerClient); with none idle,
// a new connection waits in the kernel's backlog (holding no descriptor
// of tickd's) for MaxConns, and one past PerClient is closed at once. So
// clients holding idle keep-alives from several addresses cannot keep a
// probe from a new one out. The server must report its connections'
// states to the listener: srv.ConnState = ln.ConnState.
func TCP(ctx context.Context, addr string, l Limits) (*Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Listener{Listener: ln, max: l.MaxConns, perClient: l.PerClient, open: map[string]int{},
		conns: map[*conn]struct{}{}, room: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// Listener is a TCP listener with connection caps (TCP).
type Listener struct {
	net.Listener
	max, perClient int // 0: no cap

	mu        sync.Mutex
	open      map[string]int // by client address
	conns     map[*conn]struct{}
	room      chan struct{} // a connection closed
	closed    chan struct{}
	closeOnce sync.Once
}

// conn is an accepted connection: it gives its place back when closed.
type conn struct {
	net.Conn
	l     *Listener
	host  string
	once  sync.Once
	state http.ConnState // as the server last reported it
	since time.Time      // when it entered state
}

// Accept waits for room under MaxConns (making it from an idle
// connection if it can), then accepts, and makes room or refuses past
// PerClient.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if err := l.waitRoom(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		if l.perClient > 0 && l.open[host] >= l.perClient {
			victim := l.idlest(host)
			l.mu.Unlock()
			if victim == nil {
				c.Close()
				continue
			}
			victim.Close()
			l.mu.Lock()
		}
		cc := &conn{Conn: c, l: l, host: host, state: http.StateNew, since: time.Now()}
		l.open[host]++
		l.conns[cc] = struct{}{}
		l.mu.Unlock()
		return cc, nil
	}
}

// waitRoom returns once fewer than MaxConns are open: it closes the
// idlest connection when they are all open, or waits for one to close.
func (l *Listener) waitRoom() error {
	for {
		l.mu.Lock()
		if l.max <= 0 || len(l.conns) < l.max {
			l.mu.Unlock()
			return nil
		}
		victim := l.idlest("")
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
			continue
		}
		select {
		case <-l.room:
		case <-l.closed:
			return net.ErrClosed
		}
	}
}

// newGrace is how long a new connection has to send its request before
// it counts as idle.
const newGrace = time.Second

// idlest is the connection (of host, or any for "") idle the longest: a
// keep-alive between requests, or one that sent nothing for newGrace; nil
// when every one is serving a request. l.mu is held.
func (l *Listener) idlest(host string) *conn {
	var v *conn
	for c := range l.conns {
		waiting := c.state == http.StateIdle || c.state == http.StateNew && time.Since(c.since) > newGrace
		if (host == "" || c.host == host) && waiting && (v == nil || c.since.Before(v.since)) {
			v = c
		}
	}
	return v
}

// ConnState is the server's hook (http.Server.ConnState): it tells the
// listener which connections are idle.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = u.NetConn() // a TLS connection: the one accepted is under it
	}
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	c.state, c.since = s, time.Now()
	l.mu.Unlock()
}

// Close stops accepting; the connections open stay, until their server
// closes them.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (c *conn) Close() error {
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		if l.open[c.host]--; l.open[c.host] <= 0 {
			delete(l.open, c.host)
		}
		delete(l.conns, c)
		l.mu.Unlock()
		select {
		case l.room <- struct{}{}:
		default:
		}
	})
	return c.Conn.Close()
}
