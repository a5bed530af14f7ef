package lease_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/drivertest"
)

// TestConformance runs lease/drivertest on every store: the Redis driver
// on a single Redis, a replicated pair (every grant and renewal
// acknowledged by the replica) and a Cluster (three masters with a
// replica each, acknowledged per shard), and the in-process driver; and on
// a single Redis and in-process again with every task in 4 shards. A
// store's servers start when its subtest runs, so that
// `go test -run TestConformance/memory/Batch` starts none.
func TestConformance(t *testing.T) {
	kits := map[string]func(*testing.T) func(*testing.T) drivertest.Kit{
		"redis": func(*testing.T) func(*testing.T) drivertest.Kit {
			return func(t *testing.T) drivertest.Kit { return redisKit(t, redistest.Start(t).Addr) }
		},
		"memory": func(*testing.T) func(*testing.T) drivertest.Kit { return memoryKit },
		// Every case again, each task in 4 shards.
		"redis-sharded": func(*testing.T) func(*testing.T) drivertest.Kit {
			return func(t *testing.T) drivertest.Kit { return drivertest.Sharded(redisKit(t, redistest.Start(t).Addr), 4) }
		},
		"memory-sharded": func(*testing.T) func(*testing.T) drivertest.Kit {
			return func(t *testing.T) drivertest.Kit { return drivertest.Sharded(memoryKit(t), 4) }
		},
		"redis-replicated": func(t *testing.T) func(*testing.T) drivertest.Kit {
			pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
			return func(t *testing.T) drivertest.Kit { return redisKit(t, pair.Primary.Addr) }
		},
		"redis-cluster": func(t *testing.T) func(*testing.T) drivertest.Kit {
			cl := redistest.StartCluster(t)
			return func(t *testing.T) drivertest.Kit {
				return redisKitWith(t, func() lease.RedisClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) })
			}
		},
	}
	for name, setUp := range kits {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each store on a Redis of its own
			drivertest.Run(t, setUp(t))
		})
	}
}

// redisKit makes stores on the Redis at addr, with the default
// acknowledgement (AcksAuto); each kit has a key prefix of its own.
func redisKit(t *testing.T, addr string) drivertest.Kit {
	return redisKitWith(t, func() lease.RedisClient { return redis.NewClient(&redis.Options{Addr: addr}) })
}

func redisKitWith(t *testing.T, newClient func() lease.RedisClient) drivertest.Kit {
	return lease.RedisKitWith(t, newClient)
}

func memoryKit(t *testing.T) drivertest.Kit { return lease.MemoryKit(t) }
