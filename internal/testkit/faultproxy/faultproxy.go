// Package faultproxy is a TCP proxy on loopback that a test controls: it can
// stall traffic (bytes stop flowing both ways, connections stay open, as in a
// network partition), cut every connection, and move to another target.
package faultproxy

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	Addr string

	target string
	ln     net.Listener

	// flow is held for reading by each chunk's write, so that Stall can
	// wait for the writes already past the check.
	flow sync.RWMutex

	mu      sync.Mutex
	stalled bool
	resume  chan struct{} // closed when a stall ends
	conns   map[net.Conn]struct{}
}

// Start listens on a free loopback port and forwards to target until the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		expect.Fatalf(t, "%v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	u, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(u, c) }()
	go func() { defer wg.Done(); p.pipe(c, u) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// pipe copies src to dst, holding each chunk while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.write(dst, buf[:n]) {
			return
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// write sends b to dst once the proxy is not stalled, and reports whether
// it could.
func (p *Proxy) write(dst net.Conn, b []byte) bool {
	for {
		p.flow.RLock()
		p.mu.Lock()
		stalled, wait := p.stalled, p.resume
		p.mu.Unlock()
		if !stalled {
			_, err := dst.Write(b)
			p.flow.RUnlock()
			return err == nil
		}
		p.flow.RUnlock()
		<-wait
	}
}

// Stall stops all traffic until Resume; connections stay open. When it
// returns no byte goes through any more: a write already under way has
// ended, so what the target has seen is all it will see until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if !p.stalled {
		p.stalled = true
		p.resume = make(chan struct{})
	}
	p.mu.Unlock()
	p.flow.Lock()
	//lint:ignore SA2001 an empty critical section: it waits for the writes under way
	p.flow.Unlock()
}

// Resume lets held traffic through again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// Retarget sends new connections to target, as a managed service's
// endpoint moves to a promoted replica; open ones stay where they are
// (Cut them).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Cut closes every open connection (new ones are still accepted).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Resume()
	p.Cut()
}
