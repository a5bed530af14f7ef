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

	"golang.org/x/net/netutil"
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

// TCP listens on addr with l's connection caps: connections beyond
// MaxConns wait in the kernel's backlog (they hold no descriptor of
// tickd's); one beyond PerClient from an address is closed at once.
func TCP(ctx context.Context, addr string, l Limits) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if l.PerClient > 0 {
		ln = &perClient{Listener: ln, max: l.PerClient, open: map[string]int{}}
	}
	if l.MaxConns > 0 {
		ln = netutil.LimitListener(ln, l.MaxConns)
	}
	return ln, nil
}

// perClient closes a connection from an address that has max open already.
type perClient struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (p *perClient) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		p.mu.Lock()
		over := p.open[host] >= p.max
		if !over {
			p.open[host]++
		}
		p.mu.Unlock()
		if over {
			c.Close()
			continue
		}
		return &counted{Conn: c, p: p, host: host}, nil
	}
}

// counted is a connection that gives its place back when closed, once.
type counted struct {
	net.Conn
	p    *perClient
	host string
	once sync.Once
}

func (c *counted) Close() error {
	c.once.Do(func() {
		c.p.mu.Lock()
		if c.p.open[c.host]--; c.p.open[c.host] <= 0 {
			delete(c.p.open, c.host)
		}
		c.p.mu.Unlock()
	})
	return c.Conn.Close()
}
