package lease_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/drivertest"
	"github.com/tickd/tickd/lease/memdriver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// TestConformance runs lease/drivertest on the Redis driver: on a single
// Redis, a replicated pair (every grant and renewal acknowledged by the
// replica) and a Cluster (three masters with a replica each, acknowledged
// per shard), and on a single Redis again with every task in 4 shards. A
// store's servers start when its subtest runs, so that
// `go test -run TestConformance/redis/Batch` starts one. The in-process
// driver's tests are drivertest alone (lease/memdriver).
func TestConformance(t *testing.T) {
	type setUp func(*testing.T) (shards int, newKit func(*testing.T) drivertest.Kit)
	kits := map[string]setUp{
		"redis": func(*testing.T) (int, func(*testing.T) drivertest.Kit) {
			return 1, func(t *testing.T) drivertest.Kit { return redisKit(t, redistest.Start(t).Addr) }
		},
		// Every case again, each task in 4 shards.
		"redis-sharded": func(*testing.T) (int, func(*testing.T) drivertest.Kit) {
			return 4, func(t *testing.T) drivertest.Kit { return redisKit(t, redistest.Start(t).Addr) }
		},
		"redis-replicated": func(t *testing.T) (int, func(*testing.T) drivertest.Kit) {
			pair := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
			return 1, func(t *testing.T) drivertest.Kit { return redisKit(t, pair.Primary.Addr) }
		},
		"redis-cluster": func(t *testing.T) (int, func(*testing.T) drivertest.Kit) {
			cl := redistest.StartCluster(t)
			return 1, func(t *testing.T) drivertest.Kit {
				return redisKitWith(t, func() redisdriver.RedisClient {
					return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
				})
			}
		},
	}
	for name, setUp := range kits {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each store on a Redis of its own
			n, newKit := setUp(t)
			drivertest.RunSharded(t, n, newKit)
		})
	}
}

// redisKit makes drivers on the Redis at addr, with the default
// acknowledgement (AcksAuto); each kit has a key prefix of its own.
func redisKit(t *testing.T, addr string) drivertest.Kit {
	return redisKitWith(t, func() redisdriver.RedisClient { return redis.NewClient(&redis.Options{Addr: addr}) })
}

// redisKitWith makes a driver on a client of its own at each call, as
// another replica's, under the kit's key prefix.
func redisKitWith(t *testing.T, newClient func() redisdriver.RedisClient) drivertest.Kit {
	prefix := "t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return func() driver.Driver {
		c := newClient()
		t.Cleanup(func() { c.(interface{ Close() error }).Close() })
		d, err := redisdriver.New(c, prefix, driver.AcksAuto)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// memoryKit gives one in-process driver, the same at every call.
func memoryKit(*testing.T) drivertest.Kit {
	d := memdriver.New()
	return func() driver.Driver { return d }
}

// TestDriversAgree runs the same random operations against a store on the
// Redis driver and one on the in-process driver (drivertest.Compare), and
// compares every answer: the in-process driver is a Go twin of the Lua
// scripts, and a twin drifts (tick.lua dropped at most driver.TickAgeDrop
// too-old records a write while the twin dropped all). CI runs a fixed
// seed; TICKD_DIFF_SEED and TICKD_DIFF_OPS run others, longer:
//
//	TICKD_DIFF_SEED=$RANDOM TICKD_DIFF_OPS=20000 go test -run TestDriversAgree ./internal/lease
func TestDriversAgree(t *testing.T) {
	seed, ops := uint64(20261125), 1500
	if s, err := strconv.ParseUint(os.Getenv("TICKD_DIFF_SEED"), 10, 64); err == nil {
		seed = s
	}
	if n, err := strconv.Atoi(os.Getenv("TICKD_DIFF_OPS")); err == nil {
		ops = n
	}
	drivertest.Compare(t, redisKit(t, redistest.Start(t).Addr), memoryKit(t), seed, ops)
}
