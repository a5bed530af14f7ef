package redisdriver

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The driver's own tests check its codecs and scripts against Redis; the
// tests that run it under a Store are lease's (lease imports this package).

var bg = context.Background()

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// testScript is a script of the tests' own, after the prelude (it reads
// ARGV as it likes: it is no script of tickd's).
func testScript(body string) *redis.Script { return redis.NewScript(luaPrelude() + body) }
