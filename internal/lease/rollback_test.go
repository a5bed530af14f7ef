package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/faultproxy"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// TestRollbackThroughAPromotedReplica: a primary restarts from an older
// snapshot, its replica copies that older data (a full resync), and the
// replica is promoted before any tickd called the restarted primary. The
// epoch the replica holds is the snapshot's, and trusts the replica as a
// successor: neither run_id check tells a loss. A tickd that was granted
// (and trusted) a lease the rollback forgot does, by its first call there
// or by its next look for a loss: nothing is granted for the maximum TTL,
// in any bucket of the server, and the tick it ran after the snapshot is
// not run again by another. Without the check, B ran it again.
func TestRollbackThroughAPromotedReplica(t *testing.T) {
	for _, by := range []string{"a call", "the loss watch"} {
		t.Run(by, func(t *testing.T) {
			const ttl = time.Second
			a, b, T1 := rolledBackThroughAReplica(t, ttl)
			if by == "a call" {
				_, err := a.Acquire(bg, driver.Request{Task: "sync", Entity: "other", TTL: ttl, Reason: driver.ReasonTrigger})
				expect.True(t, fmt.Sprintf("A's first call on the promoted replica finds the loss: %v", err), errors.Is(err, ErrQuarantine))
			} else {
				expect.WaitFor(t, 5*LossWatch, "A's loss watch finding the loss", func() bool { return a.Quarantine() > 0 })
			}
			_, err := b.Acquire(bg, req("another task's", ttl))
			expect.True(t, fmt.Sprintf("every bucket of the server waits: %v", err), errors.Is(err, ErrQuarantine))
			expect.WaitFor(t, 10*time.Second, "the quarantine to end", func() bool {
				_, err = b.Acquire(context.Background(), tickReq("e", ttl, T1))
				return !errors.Is(err, ErrQuarantine)
			})
			expect.True(t, fmt.Sprintf("the tick A ran after the snapshot does not run again: %v", err), errors.Is(err, ErrAlreadyRan))
		})
	}
}

// rolledBackThroughAReplica: store A runs tick T1 of entity e after a
// snapshot; the primary restarts from the snapshot, its replica copies it
// and is promoted, and A is pointed at it; B is a store on it.
func rolledBackThroughAReplica(t *testing.T, ttl time.Duration) (a, b *Store, T1 time.Time) {
	pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
	toA := faultproxy.Start(t, pair.Primary.Addr) // A's way to the primary, then to its successor
	a = newRedisStore(t, newClient(t, toA.Addr), Options{Replica: "A", MaxTTL: ttl})
	a.InitEpoch(bg) //nolint:errcheck
	T0 := time.Now().Truncate(time.Second).Add(-2 * time.Second)
	T1 = T0.Add(time.Second)
	mustRelease(t, mustAcquire(t, a, tickReq("e", ttl, T0))) // the epoch knows the server and its replica
	pair.WaitInSync(t)
	snap := pair.Primary.Snapshot()
	primary := redis.NewClient(&redis.Options{Addr: pair.Primary.Addr})
	defer primary.Close()
	expect.Equal(t, "a marker after the snapshot", primary.Set(bg, "after-snapshot", "1", 0).Err(), nil)
	mustRelease(t, mustAcquire(t, a, tickReq("e", ttl, T1))) // acknowledged by the replica
	pair.WaitInSync(t)

	toA.Stall() // no tickd calls the restarted primary
	pair.Primary.RestartFrom(snap)
	replica := redis.NewClient(&redis.Options{Addr: pair.Replica.Addr})
	defer replica.Close()
	expect.WaitFor(t, 20*time.Second, "the replica holding the restarted primary's older data", func() bool {
		n, err := replica.Exists(bg, "after-snapshot").Result()
		return err == nil && n == 0
	})
	pair.Primary.Stop()
	pair.Link.Cut()
	redistest.Promote(t, pair.Replica)
	toA.Retarget(pair.Replica.Addr)
	toA.Cut()
	toA.Resume()
	return a, newRedisStore(t, newClient(t, pair.Replica.Addr), Options{Replica: "B", MaxTTL: ttl}), T1
}
