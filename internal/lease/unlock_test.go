package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
)

// TestUnlockTellsTheHolderAtOnce: an unlock by another process (an
// operator's tickd unlock) reaches the lease's holder at once, through
// Redis's publish: its run stops, or does not start (Check fails), well
// before the lease's next renewal (a third of its 30s TTL). Before, a run
// revoked 80ms after its grant started and ran until that renewal.
func TestUnlockTellsTheHolderAtOnce(t *testing.T) {
	addr := redistest.Start(t).Addr
	k := redisKitOn(t, addr)
	holder, operator := k.client(Options{Replica: "holder"}), k.client(Options{Replica: "cli"})
	ctx := context.Background()
	l, err := holder.Acquire(ctx, driver.Request{Task: "t", Entity: "e", TTL: 30 * time.Second, Reason: driver.ReasonTick, Tick: time.Now().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// The holder's subscription is up before the unlock (it subscribes
	// when the store starts): this Redis is the test's own.
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	expect.WaitFor(t, 10*time.Second, "the holder's subscription", func() bool {
		chs, err := c.PubSubChannels(ctx, "*:revoked").Result()
		return err == nil && len(chs) > 0
	})
	began := time.Now()
	if _, err := operator.Unlock(ctx, "t", "e", "ops", false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told of the unlock within 5s (its renewal is 10s away)")
	}
	t.Logf("the holder was told %v after the unlock", time.Since(began).Round(time.Millisecond))
	if err := l.Check(); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Check after the unlock: %v, want ErrRevoked (the run does not start)", err)
	}
}
