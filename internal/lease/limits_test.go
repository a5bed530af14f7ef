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

// TestGroupsFlagTheStarved: a fair limit's group is starved when it had
// runs waiting the whole last minute and got less than half of the starts
// its weight was owed among the groups waiting; one that began to wait
// within the minute is not, however few it got, nor is one that got half.
// The groups are said longest waiting first.
func TestGroupsFlagTheStarved(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	long, short := now.Add(-2*time.Minute), now.Add(-10*time.Second)
	st := driver.LimitState{Starts: 120, GroupsWaiting: 4, Groups: []driver.LimitGroup{
		{Name: "big", Waiting: 900, Oldest: long, Since: long, Weight: 2, Started: 100},               // owed 48
		{Name: "few", Waiting: 3, Oldest: long.Add(time.Second), Since: long, Weight: 1, Started: 11}, // owed 24: starved
		{Name: "half", Waiting: 3, Oldest: long.Add(2 * time.Second), Since: long, Weight: 1, Started: 12},
		{Name: "new", Waiting: 1, Oldest: long.Add(-time.Hour), Since: short, Weight: 1, Started: 0}, // a run with an old tick, just in line
	}}
	gs, starved := groups(st, now)
	if starved != 1 || len(gs) != 4 || gs[0].Name != "new" || gs[1].Name != "big" {
		t.Fatalf("starved %d, groups %+v: want 1 starved, new (oldest run) first then big", starved, gs)
	}
	for _, g := range gs {
		if g.Starved != (g.Name == "few") {
			t.Errorf("%s (started %d, owed %.1f): starved %v", g.Name, g.Started, g.FairShare, g.Starved)
		}
	}
}
