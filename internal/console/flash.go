package console

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// flashes are the messages the console shows after an action ("Done: …"):
// kept here, server side, under a random id the redirect carries, for the
// user who acted. A link's ?done= is never shown as text: a crafted link
// cannot put words ("session expired: re-enter your password at …") on an
// admin page as the server's own. A message is shown within flashTTL,
// to its user only, on the replica that wrote it (behind a load
// balancer another replica shows none).
type flashes struct {
	mu sync.Mutex
	m  map[string]flash
}

type flash struct {
	user, text string
	at         time.Time
}

// flashTTL bounds how long a message waits for its page; maxFlashes how
// many wait at once (the oldest go first).
const (
	flashTTL   = 5 * time.Minute
	maxFlashes = 1000
)

// put keeps text for user and returns its id.
func (f *flashes) put(user, text string) string {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck // never fails (crypto/rand)
	id := hex.EncodeToString(b)
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]flash{}
	}
	for k, x := range f.m {
		if now.Sub(x.at) > flashTTL {
			delete(f.m, k)
		}
	}
	for len(f.m) >= maxFlashes {
		var oldest string
		for k, x := range f.m {
			if oldest == "" || x.at.Before(f.m[oldest].at) {
				oldest = k
			}
		}
		delete(f.m, oldest)
	}
	f.m[id] = flash{user: user, text: text, at: now}
	return id
}

// take returns the message id holds for user (again on the page's
// refreshes, within flashTTL); "" for any other id or user.
func (f *flashes) take(user, id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	x, ok := f.m[id]
	if !ok || x.user != user || time.Since(x.at) > flashTTL {
		return ""
	}
	return x.text
}
