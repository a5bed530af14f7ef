package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
)

// TestLimitSlotsComeBackAfterAKill: a replica cut off from Redis (its
// client closed: as a kill -9, nothing more of it reaches Redis) while its
// run holds a limit's only place: the place is not given to another run
// while the run's lease could still be trusted (one lease TTL after its
// last renewal), and comes back within 1⅓ lease TTL of the cut, as
// docs/configuration.md says.
func TestLimitSlotsComeBackAfterAKill(t *testing.T) {
	addr := redistest.Start(t).Addr
	var first *redis.Client
	k := redisKitWith(t, func() RedisClient {
		c := redis.NewClient(&redis.Options{Addr: addr})
		if first == nil {
			first = c
		}
		return c
	})
	a, b := k.client(Options{Replica: "a"}), k.client(Options{Replica: "b"})
	lim := driver.Limit{Name: "api", Concurrency: 1, Burst: 1}
	a.SetLimits([]driver.Limit{lim})
	b.SetLimits([]driver.Limit{lim})
	const ttl = 3 * time.Second
	ask := func(s *Store, entity string) error {
		_, err := s.Acquire(context.Background(), driver.Request{Task: "t", Entity: entity, TTL: ttl, Reason: driver.ReasonTrigger, Limits: []string{"api"}})
		return err
	}
	if err := ask(a, "held"); err != nil {
		t.Fatal(err)
	}
	first.Close()
	cut := time.Now()
	for {
		err := ask(b, "next")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLimited) {
			t.Fatal(err)
		}
		if time.Since(cut) > 10*time.Second {
			t.Fatal("the place of a cut-off replica's run never came back")
		}
		time.Sleep(50 * time.Millisecond) // polls Redis, which has no signal for it
	}
	d := time.Since(cut)
	t.Logf("the place came back %v after the cut (lease_ttl %v)", d.Round(time.Millisecond), ttl)
	if d < ttl {
		t.Fatalf("the place came back %v after the cut: before one lease TTL (%v), while the run's lease could be trusted", d, ttl)
	}
	if d > ttl+ttl/3+time.Second {
		t.Fatalf("the place came back %v after the cut: want within 1⅓ lease TTL (%v)", d, ttl+ttl/3)
	}
}
