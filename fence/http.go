package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The headers of tickd's HTTP actions that say whose run a request is:
// its fence, its task and its entity (both percent-encoded as a URL path
// segment is, url.PathEscape: an entity id may hold any character).
const (
	HeaderFence  = "Tickd-Fence"
	HeaderTask   = "Tickd-Task"
	HeaderEntity = "Tickd-Entity"
)

// A Store keeps the highest fence seen per key, for [Middleware].
type Store interface {
	// Advance makes fence the highest under key, or returns a
	// *StaleError (ErrStale) when a higher one is.
	Advance(ctx context.Context, key string, fence int64) error
}

// Memory is a Store in this process, for a service of one instance. Its
// zero value is ready; it keeps a fence per key it has seen.
type Memory struct {
	mu      sync.Mutex
	highest map[string]int64
}

// Advance is Store's.
func (m *Memory) Advance(_ context.Context, key string, fence int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.highest[key]; fence < h {
		return &StaleError{Key: key, Fence: fence, Highest: h}
	}
	if m.highest == nil {
		m.highest = map[string]int64{}
	}
	m.highest[key] = fence
	return nil
}

// RedisStore is a Store in Redis, shared by a service's instances: the
// Redis guard on the key Prefix + key.
type RedisStore struct {
	Client redis.Scripter
	Prefix string
}

// Advance is Store's.
func (r RedisStore) Advance(ctx context.Context, key string, fence int64) error {
	_, err := Redis(ctx, r.Client, r.Prefix+key, fence, "")
	var stale *StaleError
	if errors.As(err, &stale) {
		stale.Key = key
	}
	return err
}

// Token is a request's run, as Middleware read it: the key of its (task,
// entity) and its fence.
type Token struct {
	Task, Entity string
	Fence        int64
}

type tokenKey struct{}

// FromContext is the Token of the request whose context ctx is, when
// Middleware let it through.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}

// Middleware lets a request through to next only when its fence is at
// least the highest s has seen for its (task, entity), Key(task, entity),
// and makes it the highest. It answers
//   - 400 to a request without tickd's three headers, or with bad ones;
//   - 409 Conflict to a stale fence: a newer run of the entity has called;
//   - 503 when s fails (tickd backs off and retries a 503).
//
// Requests of one key are let through one at a time in this process, each
// after the one before has been answered, so that a stale one admitted
// first cannot write after a newer one. Between instances of a service,
// what a request writes is checked where it lands: the fence is in the
// request's context (FromContext) for the Postgres or Redis guard.
func Middleware(s Store, next http.Handler) http.Handler {
	var locks keyLocks
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := tokenOf(r.Header)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := Key(tok.Task, tok.Entity)
		unlock := locks.lock(key)
		defer unlock()
		switch err := s.Advance(r.Context(), key, tok.Fence); {
		case errors.Is(err, ErrStale):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case err != nil:
			http.Error(w, "fence: the store failed", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
	})
}

// tokenOf reads a request's run from tickd's headers.
func tokenOf(h http.Header) (Token, error) {
	var tok Token
	var err error
	if tok.Fence, err = Parse(h.Get(HeaderFence)); err != nil {
		return tok, fmt.Errorf("%s: %w", HeaderFence, err)
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{HeaderTask, &tok.Task}, {HeaderEntity, &tok.Entity}} {
		v := h.Get(f.name)
		if *f.to, err = url.PathUnescape(v); err != nil || v == "" {
			return tok, fmt.Errorf("fence: %s: missing or not percent-encoded", f.name)
		}
	}
	return tok, nil
}

// SetHeaders sets tickd's three headers of a run on h: what its HTTP
// actions send, for a caller of its own.
func SetHeaders(h http.Header, task, entity string, fence int64) {
	h.Set(HeaderFence, strconv.FormatInt(fence, 10))
	h.Set(HeaderTask, url.PathEscape(task))
	h.Set(HeaderEntity, url.PathEscape(entity))
}

// keyLocks are mutexes by key, each kept while it is held or waited for.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
