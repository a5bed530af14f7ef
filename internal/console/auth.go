package console

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/config"
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
// wrong password does. Made when the users are read, never at package
// init (every tickd command would pay for it).
func decoy(cost int) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte("tickd: no such user"), cost)
}

// Auth is basic auth against the [web] table's htpasswd file, with the
// login limiter: the middleware Front puts in front of a Console that has
// users. It reads the file again on Reload (the daemon's SIGHUP) and when
// the file changes (looked at every fileCheck at most, on a request), so
// that a removed user or a changed password stops working at once.
type Auth struct {
	log     *slog.Logger
	proxies proxies
	fails   *failures

	mu      sync.Mutex
	users   *userSet
	file    string
	admins  []string
	stamp   fileStamp // of the file users were read from
	checked time.Time // when the file was last looked at
}

// fileCheck is how often, at most, Auth looks whether its file changed.
const fileCheck = 2 * time.Second

// userSet is one reading of the file: the users, the decoy of their cost,
// the admins, and the credentials accepted since.
type userSet struct {
	users  htpasswd.Users
	decoy  []byte
	admins map[string]bool

	mu   sync.Mutex
	good map[[32]byte]bool // sha256 of user, password and hash: accepted
}

// fileStamp tells a file's versions apart.
type fileStamp struct {
	size    int64
	modTime time.Time
	ino     uint64
}

// NewAuth reads w's htpasswd file and admins; an admin who is not a user,
// or a user with an empty password, is refused.
func NewAuth(w *config.Web, log *slog.Logger) (*Auth, error) {
	a := &Auth{log: log, proxies: parseProxies(w.TrustedProxies), fails: &failures{by: map[string]*failCount{}}}
	us, stamp, err := readUsers(w.HtpasswdFile, w.Admins, nil, true)
	if err != nil {
		return nil, err
	}
	a.users, a.stamp, a.file, a.admins, a.checked = us, stamp, w.HtpasswdFile, w.Admins, time.Now()
	return a, nil
}

// CheckUsers reads cfg's [web] users as the console reads them at start,
// and says every mistake as the config's own errors are said (file, line,
// key): a users' file that cannot be read, a user with an empty password,
// an admin who is not a user. tickd check and tickd run call it, so that
// check refuses what run would; nil without a users' file.
func CheckUsers(cfg *config.Config) error {
	w := cfg.Web
	if w == nil || w.HtpasswdFile == "" {
		return nil
	}
	us, err := htpasswd.Read(w.HtpasswdFile)
	if err != nil {
		return cfg.KeyError("web.htpasswd_file", "%v", err)
	}
	var errs []error
	if empty := us.EmptyPasswords(); len(empty) > 0 {
		errs = append(errs, cfg.KeyError("web.htpasswd_file", "%s", emptyPasswords(w.HtpasswdFile, empty)))
	}
	for _, a := range w.Admins {
		if _, ok := us[a]; !ok {
			errs = append(errs, cfg.KeyError("web.admins", "%s", notAUser(a, w.HtpasswdFile)))
		}
	}
	return errors.Join(errs...)
}

// emptyPasswords says that file's users empty have an empty password, and
// how to set one.
func emptyPasswords(file string, empty []string) string {
	return fmt.Sprintf("%s: users with an empty password: %s (set one with htpasswd -B -C 10 %s USER)", file, strings.Join(empty, ", "), file)
}

// notAUser says that admin is not a user of file.
func notAUser(admin, file string) string { return fmt.Sprintf("%q is not a user of %s", admin, file) }

// readUsers reads file. strict refuses an admin who is not a user (at
// start, as tickd check does); otherwise such an admin is left out: a user
// removed from the file is gone, admin or not. old's decoy is kept when
// the cost is the same.
func readUsers(file string, admins []string, old *userSet, strict bool) (*userSet, fileStamp, error) {
	stamp := stampOf(file)
	us, err := htpasswd.Read(file)
	if err != nil {
		return nil, stamp, fmt.Errorf("web.htpasswd_file: %w", err)
	}
	if empty := us.EmptyPasswords(); len(empty) > 0 {
		return nil, stamp, fmt.Errorf("web.htpasswd_file: %s", emptyPasswords(file, empty))
	}
	set := &userSet{users: us, admins: map[string]bool{}, good: map[[32]byte]bool{}}
	if old != nil && costOf(old.decoy) == us.Cost() {
		set.decoy = old.decoy
	} else if set.decoy, err = decoy(us.Cost()); err != nil {
		return nil, stamp, err
	}
	for _, name := range admins {
		if _, ok := us[name]; ok {
			set.admins[name] = true
		} else if strict {
			return nil, stamp, fmt.Errorf("web.admins: %s", notAUser(name, file))
		}
	}
	return set, stamp, nil
}

func costOf(hash []byte) int {
	c, _ := bcrypt.Cost(hash)
	return c
}

func stampOf(file string) fileStamp {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}
}

// Reload reads w's htpasswd file and admins again. A file that cannot be
// read (or has an empty password) keeps the users it would replace, and
// the error says why.
func (a *Auth) Reload(w *config.Web) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reload(w.HtpasswdFile, w.Admins, "reload")
}

// reload reads file with admins in place of the users; a.mu is held.
func (a *Auth) reload(file string, admins []string, why string) error {
	set, stamp, err := readUsers(file, admins, a.users, false)
	a.stamp, a.checked = stamp, time.Now() // a bad version is not read again until it changes
	if err != nil {
		a.log.Error("console users not reloaded: the old ones stay", "file", file, "why", why, "error", err)
		return err
	}
	a.users, a.file, a.admins = set, file, admins
	for _, name := range admins {
		if !set.admins[name] {
			a.log.Warn("console admin not in the users' file: not an admin", "user", name, "file", file)
		}
	}
	a.log.Info("console users reloaded", "file", file, "why", why, "users", len(set.users))
	return nil
}

// current is the users to check against, read again first if the file
// changed since.
func (a *Auth) current(now time.Time) *userSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.checked) >= fileCheck {
		a.checked = now
		if stampOf(a.file) != a.stamp {
			a.reload(a.file, a.admins, "file changed") //nolint:errcheck // logged; the old users stay
		}
	}
	return a.users
}

// maxGood bounds the accepted credentials remembered.
const maxGood = 256

// check returns r's user; ok is false when r does not carry valid
// credentials. Accepted credentials are remembered (bcrypt is slow on
// purpose; a page refreshes every few seconds).
func (us *userSet) check(r *http.Request) (u User, ok bool) {
	name, pass, given := r.BasicAuth()
	u.Name = name
	if !given || pass == "" || len(pass) > htpasswd.MaxPassword {
		return u, false // bcrypt would ignore what follows byte 72
	}
	hash, known := us.users[name]
	if !known {
		hash = us.decoy
	}
	key := sha256.Sum256([]byte(name + "\x00" + pass + "\x00" + string(hash)))
	us.mu.Lock()
	cached := us.good[key]
	us.mu.Unlock()
	if !cached {
		// bcrypt compares in constant time; an unknown user is compared
		// too, against a hash no password matches.
		if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil || !known {
			return u, false
		}
		us.mu.Lock()
		if len(us.good) >= maxGood {
			clear(us.good)
		}
		us.good[key] = true
		us.mu.Unlock()
	}
	if us.admins[name] {
		u.Role = Admin
	}
	return u, true
}

// Wrap lets a request through to next with its user, or answers 401 (no
// or wrong credentials: each failure is logged with its count) or 429 (a
// user that failed too often lately from this client).
func (a *Auth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, now := a.proxies.client(r), time.Now()
		given, _, _ := r.BasicAuth()
		key := client + "\x00" + given
		if blocked, refused, log := a.fails.blocked(key, now); blocked {
			if log {
				a.log.Warn("console login refused: too many failures", "user", given, "client", client, "refused", refused)
			}
			http.Error(w, "too many failed logins: try again in a minute", http.StatusTooManyRequests)
			return
		}
		u, ok := a.current(now).check(r)
		if !ok {
			if _, _, given := r.BasicAuth(); given {
				n := a.fails.failed(key, now)
				a.log.Warn("console login failed", "user", u.Name, "client", client, "failures", n)
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="tickd", charset="UTF-8"`)
			http.Error(w, "log in to see the tickd console", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), u)))
	})
}

// failures counts failed logins by client and user: after maxFails within
// failWindow, that user from that client is refused (429) until the window
// ends, without a password being looked at; another user, or the same user
// from another client, is not (a proxy's many clients share its address:
// proxies.client says which one it is).
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

// proxies are [web] trusted_proxies: the networks whose X-Forwarded-For
// and X-Forwarded-Proto are believed.
type proxies []*net.IPNet

func parseProxies(cidrs []string) proxies {
	var ps proxies
	for _, p := range cidrs {
		if _, n, err := net.ParseCIDR(p); err == nil {
			ps = append(ps, n)
		}
	}
	return ps
}

// client is who sent r: its peer's address, or, when the peer is a trusted
// proxy, the nearest address in X-Forwarded-For that is not one.
func (ps proxies) client(r *http.Request) string {
	peer := remoteHost(r)
	if !ps.trust(peer) {
		return peer
	}
	xff := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(xff) - 1; i >= 0; i-- {
		a := strings.TrimSpace(xff[i])
		if a == "" {
			continue
		}
		if !ps.trust(a) {
			return a
		}
		peer = a
	}
	return peer
}

// trust says whether addr is in a trusted network.
func (ps proxies) trust(addr string) bool {
	ip := net.ParseIP(addr)
	for _, n := range ps {
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
