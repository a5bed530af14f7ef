package lease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/lease/driver"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/redisdriver"
)

// twoBuckets returns two task names in different buckets.
func twoBuckets() (string, string) {
	a := "t"
	for _, b := range []string{"u", "v", "w", "x", "y"} {
		if !SameBucket(a, b) {
			return a, b
		}
	}
	panic("no two buckets")
}

// TestOldLayoutRefused: beside a key only the older layout has (an older
// tickd runs on the prefix), a store grants, enqueues and takes nothing and
// says why; once the old keys are gone (tickd migrate), it goes on. A key
// of the old layout that appears later stops it within the driver's layout recheck.
func TestOldLayoutRefused(t *testing.T) {
	const recheck = 50 * time.Millisecond
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	s := newRedisStore(t, c, Options{})
	s.Driver().(interface{ SetLayoutRecheck(time.Duration) }).SetLayoutRecheck(recheck)
	c.Set(bg, "f:epoch", "0|0", 0)
	_, err := s.Acquire(bg, req("e", time.Minute))
	var le *LayoutError
	if !errors.As(err, &le) || !errors.Is(err, ErrLayout) {
		t.Fatalf("acquire beside an old layout: %v, want a *LayoutError", err)
	}
	expect.Equal(t, "old keys named", strings.Join(le.Keys, ","), "f:epoch")
	if err := s.Enqueue(bg, driver.Due{Task: "t", Entity: "e", Reason: driver.ReasonTrigger}, 0); !errors.Is(err, ErrLayout) {
		t.Fatalf("enqueue beside an old layout: %v", err)
	}
	if _, err := s.TakeDue(bg, 10, time.Minute); !errors.Is(err, ErrLayout) {
		t.Fatalf("take beside an old layout: %v", err)
	}
	c.Del(bg, "f:epoch")
	s.InitEpoch(bg) //nolint:errcheck
	mustRelease(t, mustAcquire(t, s, req("e", time.Minute)))
	expect.Equal(t, "layout recorded", c.Get(bg, "f:layout").Val(), LayoutVersion)

	c.ZAdd(bg, "f:due", redis.Z{Score: 1, Member: "t:e"}) // an older tickd started since
	expect.WaitFor(t, 2*time.Second, "the store refuses again", func() bool {
		_, err := s.Acquire(bg, req("e2", time.Minute))
		return errors.Is(err, ErrLayout)
	})

	c.Del(bg, "f:due")
	c.Set(bg, "f:layout", "4", 0) // a newer tickd's
	expect.WaitFor(t, 2*time.Second, "a newer layout refused", func() bool {
		_, err := s.Acquire(bg, req("e3", time.Minute))
		return errors.As(err, &le) && le.Other == "4"
	})
}

// TestNewTaskIsNotQuarantined: a store gives every bucket an epoch before
// its first grant, so a task first run later on the same Redis (a config
// change) finds its bucket's epoch and runs at once; a bucket whose epoch
// is gone (its shard lost its data) quarantines its own tasks only.
func TestNewTaskIsNotQuarantined(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	const maxTTL = 500 * time.Millisecond
	s := newRedisStore(t, c, Options{MaxTTL: maxTTL})
	old, fresh := twoBuckets()
	if _, err := s.Acquire(bg, driver.Request{Task: old, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrQuarantine) {
		t.Fatalf("first acquire on a new Redis: %v, want the quarantine", err)
	}
	expect.WaitFor(t, 3*maxTTL, "the quarantine over", func() bool {
		l, err := s.Acquire(bg, driver.Request{Task: old, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger})
		if err == nil {
			mustRelease(t, l)
		}
		return err == nil
	})
	l, err := s.Acquire(bg, driver.Request{Task: fresh, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger})
	if err != nil {
		t.Fatalf("a task new to this Redis, in another bucket: %v", err)
	}
	mustRelease(t, l)

	c.Del(bg, redisdriver.EpochKey("f", old)) // that bucket's shard lost its data
	if _, err := s.Acquire(bg, driver.Request{Task: old, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrQuarantine) {
		t.Fatalf("acquire in a bucket that lost its epoch: %v, want the quarantine", err)
	}
	if l, err = s.Acquire(bg, driver.Request{Task: fresh, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger}); err != nil {
		t.Fatalf("a task of another bucket during that quarantine: %v", err)
	}
	mustRelease(t, l)
}

// TestMigrateFromLayout1: the keys an older tickd left (its epoch, a task's
// hash, a pending request) are moved into the buckets with nothing lost;
// Migrate refuses while a replica runs.
func TestMigrateFromLayout1(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	T := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A run of u 1 that ended 5ms after T: its value as layout 1 stored it.
	ran := "1767225600000|42||0|0|1767225600000||0|#done|1767225600000|1767225600005|42|tick|old"
	c.Set(bg, "f:epoch", "0|0", 0)
	c.HSet(bg, "f:{sync-users}:entities", "u%201", ran)
	c.ZAdd(bg, "f:due", redis.Z{Score: float64(T.UnixMilli()), Member: "sync-users:u%202"})
	c.HSet(bg, "f:dueinfo", "sync-users:u%202", "retry|2|"+strconv.FormatInt(T.UnixMilli(), 10)+"|nonce:1")
	s := newRedisStore(t, c, Options{})

	c.HSet(bg, "f:replicas", "old-replica", fmt.Sprintf("%d|sync-users||||0|0", time.Now().Add(time.Hour).UnixMilli())) // announcing sync-users for an hour
	if _, err := s.Fleet().Migrate(bg); !errors.Is(err, ErrReplicasRunning) {
		t.Fatalf("migrate while a replica announces its tasks: %v", err)
	}
	c.Del(bg, "f:replicas")
	m, err := s.Fleet().Migrate(bg)
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "tasks moved", m.Tasks, 1)
	expect.Equal(t, "requests moved", m.Due, 1)
	if n := c.Exists(bg, "f:epoch", "f:due", "f:dueinfo", "f:{sync-users}:entities").Val(); n != 0 {
		t.Fatalf("%d old keys left", n)
	}
	st, err := s.Fleet().Entity(bg, "sync-users", "u 1")
	if err != nil || st.Last == nil || st.Last.Fence != 42 {
		t.Fatalf("the task's hash after migrate: %+v, %v", st, err)
	}
	_, err = s.Acquire(bg, driver.Request{Task: "sync-users", Entity: "u 1", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
	expect.True(t, "the tick that ran before still counts as run: "+fmt.Sprint(err), errors.Is(err, ErrAlreadyRan))
	ds, err := s.TakeDue(bg, 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].Entity != "u 2" || ds[0].Reason != driver.ReasonRetry || ds[0].Attempt != 2 || !ds[0].Tick.Equal(T) {
		t.Fatalf("the pending request after migrate: %+v, %v", ds, err)
	}
	if m, err := s.Fleet().Migrate(bg); err != nil || m != (driver.Migrated{}) {
		t.Fatalf("a second migrate: %+v, %v", m, err)
	}
}

// TestDuePollFindsOtherTasks: a replica that announced its tasks polls
// their buckets, and every bucket every redisdriver.AllBucketsEvery polls: a request
// for a task it does not run (in another bucket) is still taken, so that it
// can be left for a replica that runs it, or dropped.
func TestDuePollFindsOtherTasks(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, newClient(t, srv.Addr), Options{})
	s.InitEpoch(bg) //nolint:errcheck
	mine, other := twoBuckets()
	if err := s.Fleet().Announce(bg, []string{mine}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(bg, driver.Due{Task: other, Entity: "e", Reason: driver.ReasonTrigger}, 0); err != nil {
		t.Fatal(err)
	}
	polls := 0
	for ; polls < 2*redisdriver.AllBucketsEvery; polls++ {
		ds, err := s.TakeDue(bg, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].Task == other {
			break
		}
	}
	if polls >= redisdriver.AllBucketsEvery {
		t.Fatalf("the other task's request was not taken within %d polls", redisdriver.AllBucketsEvery)
	}
}

// TestLossQuarantinesEveryBucketAtOnce: a Redis that lost its data is found
// by the store's loss watch within about a second, with no task ticking,
// and every bucket is quarantined from then: a task first ticking after
// that quarantine is granted at once instead of starting one of its own.
func TestLossQuarantinesEveryBucketAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	const maxTTL = time.Second
	s := newRedisStore(t, c, Options{MaxTTL: maxTTL})
	if err := s.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	early, late := twoBuckets()
	mustRelease(t, mustAcquire(t, s, driver.Request{Task: early, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger}))

	lost := time.Now()
	if err := c.FlushAll(bg).Err(); err != nil { // the data loss
		t.Fatal(err)
	}
	expect.WaitFor(t, 5*LossWatch, "every bucket's epoch back after the loss", func() bool {
		for _, k := range redisdriver.EpochKeys("f") {
			if c.Exists(bg, k).Val() == 0 {
				return false
			}
		}
		return true
	})
	// The quarantine runs maxTTL from when the watch found the loss, at
	// most a watch period (and this test's wait) after it happened. Its end
	// is read rather than what is left of it, which a slow machine may have
	// used up by now.
	found := time.Now()
	end := time.Unix(0, s.quarantine.end.Load())
	if end.Before(lost.Add(maxTTL)) || end.After(found.Add(maxTTL)) {
		t.Fatalf("the quarantine ends %v after the loss, want between %v and %v", end.Sub(lost), maxTTL, found.Add(maxTTL).Sub(lost))
	}
	expect.WaitFor(t, 3*maxTTL, "the quarantine over", func() bool { return s.Quarantine() == 0 })
	// The late task's bucket was quarantined from the loss too: its first
	// grant after it is not a quarantine of its own.
	l, err := s.Acquire(bg, driver.Request{Task: late, Entity: "e", TTL: maxTTL, Reason: driver.ReasonTrigger})
	if err != nil {
		t.Fatalf("a task first asking after the loss's quarantine: %v, want a grant", err)
	}
	mustRelease(t, l)
}
