package console

import (
	"crypto/sha256"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/internal/htpasswd"
)

// Role is what a user may do: look, or act too.
type Role int

// The roles.
const (
	Viewer Role = iota // sees every page
	Admin              // also triggers, pauses, resumes and unlocks
)

// decoy is a bcrypt hash of cost no password matches: an unknown user's
// password is compared against it, so that a wrong name costs the time a
// wrong password does. Made when the console starts, never at package
// init (every tickd command would pay for it).
func decoy(cost int) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte("tickd: no such user"), cost)
}

// authenticator checks basic auth against the users, remembers the
// credentials it accepted (bcrypt is slow on purpose; a page refreshes
// every few seconds), and slows down an address that keeps failing.
type authenticator struct {
	users  htpasswd.Users
	decoy  []byte // compared against for an unknown user: the users' cost
	admins map[string]bool
	fails  *failures

	mu   sync.Mutex
	good map[[32]byte]bool // sha256 of user, password and hash: accepted
}

// maxGood bounds the accepted credentials remembered.
const maxGood = 256

// check returns r's user and role; ok is false when r does not carry valid
// credentials.
func (a *authenticator) check(r *http.Request) (user string, role Role, ok bool) {
	user, pass, given := r.BasicAuth()
	if !given || pass == "" || len(pass) > htpasswd.MaxPassword {
		return user, Viewer, false // bcrypt would ignore what follows byte 72
	}
	hash, known := a.users[user]
	if !known {
		hash = a.decoy
	}
	key := sha256.Sum256([]byte(user + "\x00" + pass + "\x00" + string(hash)))
	a.mu.Lock()
	cached := a.good[key]
	a.mu.Unlock()
	if !cached {
		// bcrypt compares in constant time; an unknown user is compared
		// too, against a hash no password matches.
		if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil || !known {
			return user, Viewer, false
		}
		a.mu.Lock()
		if len(a.good) >= maxGood {
			clear(a.good)
		}
		a.good[key] = true
		a.mu.Unlock()
	}
	if a.admins[user] {
		return user, Admin, true
	}
	return user, Viewer, true
}

// failures counts failed logins by client and user: after maxFails within
// failWindow, that user from that client is refused (429) until the window
// ends, without a password being looked at; another user, or the same user
// from another client, is not (a proxy's many clients share its address:
// Console.client says which one it is).
type failures struct {
	mu sync.Mutex
	by map[string]*failCount
}

type failCount struct {
	n       int // failures in the window
	refused int // requests refused (429) since, counted for the log
	since   time.Time
}

const (
	maxFails   = 5
	failWindow = time.Minute
)

// blocked says whether key (client and user) failed too often lately;
// refused counts the requests refused so far, log whether to say so (the
// first of each window).
func (f *failures) blocked(key string, now time.Time) (blocked bool, refused int, log bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.by[key]
	if c == nil || now.Sub(c.since) >= failWindow || c.n < maxFails {
		return false, 0, false
	}
	c.refused++
	return true, c.refused, c.refused == 1
}

// failed counts a failure of key (client and user) and returns the count
// in the window.
func (f *failures) failed(key string, now time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.by) > 10000 { // a bound: many addresses trying at once
		clear(f.by)
	}
	c := f.by[key]
	if c == nil || now.Sub(c.since) >= failWindow {
		c = &failCount{since: now}
		f.by[key] = c
	}
	c.n++
	return c.n
}

// client is who sent r: its peer's address, or, when the peer is a trusted
// proxy, the nearest address in X-Forwarded-For that is not one.
func (c *Console) client(r *http.Request) string {
	peer := remoteHost(r)
	if !c.trusted(peer) {
		return peer
	}
	xff := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(xff) - 1; i >= 0; i-- {
		a := strings.TrimSpace(xff[i])
		if a == "" {
			continue
		}
		if !c.trusted(a) {
			return a
		}
		peer = a
	}
	return peer
}

// trusted says whether addr is in [web] trusted_proxies.
func (c *Console) trusted(addr string) bool {
	ip := net.ParseIP(addr)
	for _, n := range c.proxies {
		if ip != nil && n.Contains(ip) {
			return true
		}
	}
	return false
}

// remoteHost is r's remote address without the port.
func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
