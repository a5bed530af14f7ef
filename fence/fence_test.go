package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/fence"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
)

// TestRedisGuard: the write runs under a fence at least the highest, is
// refused below it (and nothing written), and the fence is compared as
// the integer it is, beyond 2^53 too.
func TestRedisGuard(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	write := func(f int64) error {
		_, err := fence.Redis(ctx, rdb, "{sync/e1}:fence", f, "{sync/e1}:out", "RPUSH", f)
		return err
	}
	for _, f := range []int64{5, 9, 9, 10, 1 << 60, 1<<60 + 1} {
		expect.Equal(t, fmt.Sprint("fence ", f), write(f), nil)
	}
	err := write(1 << 60)
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lower fence: %v, want a *fence.StaleError", err)
	}
	expect.Equal(t, "the highest it names", stale.Highest, 1<<60+1)
	got, _ := rdb.LRange(ctx, "{sync/e1}:out", 0, -1).Result()
	expect.Equal(t, "what was written", strings.Join(got, " "), fmt.Sprint("5 9 9 10 ", 1<<60, " ", 1<<60+1))
	_, err = fence.Redis(ctx, rdb, "{sync/e2}:fence", 3, "")
	expect.Equal(t, "advance alone", err, nil)
	expect.Equal(t, "the fence kept", rdb.Get(ctx, "{sync/e2}:fence").Val(), "3")
	_, err = fence.Redis(ctx, rdb, "{sync/e2}:fence", 0, "")
	expect.True(t, "0 is not a fence", err != nil && !errors.Is(err, fence.ErrStale))
}

// TestRedisGuardFromRedisCli: the one-liner of the script's doc, as an
// exec run has it (-e: an error reply exits 1): a stale fence's redis-cli
// prints STALE, exits 1 and writes nothing; a bad fence is an error too.
func TestRedisGuardFromRedisCli(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cli := redistest.Tool(t, "redis-cli", "redis-cli not found on PATH: install it (Debian/Ubuntu: sudo apt-get install -y redis-tools)")
	script, _ := filepath.Abs("guard.lua")
	run := func(f string) (string, error) {
		cmd := exec.Command("sh", "-c", cli+` -e -h 127.0.0.1 -p "$PORT" --eval "$SCRIPT" "{$TICKD_TASK/$TICKD_ENTITY}:fence" "{$TICKD_TASK/$TICKD_ENTITY}:out" , "$TICKD_FENCE" SET "total $TICKD_FENCE"`)
		_, port, _ := strings.Cut(srv.Addr, ":")
		cmd.Env = append(cmd.Environ(), "PORT="+port, "SCRIPT="+script, "TICKD_TASK=sync", "TICKD_ENTITY=e 1", "TICKD_FENCE="+f)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := run("7")
	expect.Equal(t, "fence 7: "+out, err, nil)
	out, err = run("6")
	expect.True(t, "fence 6 after 7: exits non-zero, says STALE: "+out, err != nil && strings.Contains(out, "STALE"))
	out, err = run("x1")
	expect.True(t, "fence x1: exits non-zero: "+out, err != nil && strings.Contains(out, "not a fence"))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	expect.Equal(t, "what was written", rdb.Get(context.Background(), "{sync/e 1}:out").Val(), "total 7")
}

// call posts to h as tickd's HTTP action does, and returns the status.
func call(t *testing.T, h http.Handler, task, entity string, f int64) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	fence.SetHeaders(req.Header, task, entity, f)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// TestMiddleware: with either store, a lower fence of a (task, entity) is
// 409 and does not reach the handler; other pairs are their own; a
// request without tickd's headers is 400.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	for name, s := range map[string]fence.Store{"memory": &fence.Memory{}, "redis": fence.RedisStore{Client: rdb, Prefix: "guard:"}} {
		var reached []string
		h := fence.Middleware(s, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			tok, _ := fence.FromContext(r.Context())
			reached = append(reached, fmt.Sprint(tok.Entity, "@", tok.Fence))
		}))
		entity := "e/1\n<x>" // any character: percent-encoded in the header
		for _, c := range []struct {
			task string
			f    int64
			want int
		}{{"sync", 5, 200}, {"sync", 7, 200}, {"sync", 6, 409}, {"sync", 7, 200}, {"other", 1, 200}} {
			expect.Equal(t, fmt.Sprintf("%s: %s's fence %d", name, c.task, c.f), call(t, h, c.task, entity, c.f), c.want)
		}
		expect.Equal(t, name+": reached", strings.Join(reached, " "), "e/1\n<x>@5 e/1\n<x>@7 e/1\n<x>@7 e/1\n<x>@1")
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set(fence.HeaderFence, "7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		expect.Equal(t, name+": no task or entity", w.Code, http.StatusBadRequest)
	}
	expect.Equal(t, "the Redis store's key", rdb.Get(context.Background(), "guard:sync/e/1\n<x>").Val(), "7")
}

// TestMiddlewareOneAtATime: a stale request let through first is answered
// before a newer one of its pair reaches the handler: what it writes
// cannot land after the newer one's.
func TestMiddlewareOneAtATime(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []int64
	inFirst, release := make(chan struct{}), make(chan struct{})
	h := fence.Middleware(&fence.Memory{}, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		tok, _ := fence.FromContext(r.Context())
		if tok.Fence == 5 {
			close(inFirst)
			<-release
		}
		mu.Lock()
		order = append(order, tok.Fence)
		mu.Unlock()
	}))
	done := make(chan int)
	go func() { done <- call(t, h, "sync", "e1", 5) }()
	<-inFirst
	go func() { done <- call(t, h, "sync", "e1", 9) }()
	go func() { done <- call(t, h, "sync", "e2", 1) }() // another pair does not wait
	expect.Equal(t, "another pair's answer", <-done, 200)
	time.AfterFunc(50*time.Millisecond, func() { close(release) }) // the newer one waits meanwhile
	expect.Equal(t, "first answer", <-done, 200)
	expect.Equal(t, "second answer", <-done, 200)
	expect.Equal(t, "the handler's order", fmt.Sprint(order), "[1 5 9]")
}
