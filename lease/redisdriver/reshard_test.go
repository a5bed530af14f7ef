package redisdriver

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// TestOneReshardAtATime: a second reshard of a task while one moves it
// (two tickd migrate at once, with different counts) is refused and moves
// nothing; the first one's count is the one recorded. Without the lock,
// the fast one wrote its count while the slow one still moved entities:
// the task ran under a count whose entities were not all where it said.
func TestOneReshardAtATime(t *testing.T) {
	c, b := reshardDriver(t)
	// Enough state that a move takes a while: 30,000 entities in shard 0.
	pipe := c.Pipeline()
	for i := range 30_000 {
		pipe.HSet(bg, b.k.entities("sync"), driver.Escape(fmt.Sprint("e", i)), entityValue{Fence: int64(i + 1)}.encode())
	}
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := b.Reshard(bg, "sync", 8)
		first <- err
	}()
	expect.WaitFor(t, 10*time.Second, "the first move under way", func() bool {
		v, _ := c.Get(bg, b.k.shards("sync")).Result()
		base, _ := splitGen(v)
		return base == movingMark(1, 8)
	})
	_, err := b.Reshard(bg, "sync", 4)
	expect.True(t, fmt.Sprintf("the second is refused as the first moves: %v", err), errors.Is(err, errMigrating))
	expect.True(t, "the first one ends well", <-first == nil)
	got, _ := c.Get(bg, b.k.shards("sync")).Result()
	got, _ = splitGen(got)
	expect.Equal(t, "the count recorded", got, "8")
	n, _ := c.Exists(bg, b.k.migrating("sync")).Result()
	expect.Equal(t, "the lock is released", n, int64(0))
	r, err := b.Reshard(bg, "sync", 4)
	expect.True(t, fmt.Sprintf("once it is over, the next runs: %v", err), err == nil && r.From == 8)
}

// TestShardCountsReadAreBounded: a count in Redis outside 1..MaxShards (a
// damaged or hostile value) is no count: before, 1e9 panicked tickd status
// and grew tickd run to 22 GB in 15s.
func TestShardCountsReadAreBounded(t *testing.T) {
	for v, want := range map[string]int{"8": 8, "64": 64, "65": 0, "1000000000": 0, "-3": 0, "0": 0} {
		n, _, _, _ := parseShards(v)
		expect.Equal(t, "count "+v, n, want)
	}
	_, from, to, moving := parseShards("m:1000000000:4")
	expect.True(t, "a move from a count out of bounds is no move", !moving && from == 0 && to == 0)
	_, from, to, moving = parseShards("m:4:8")
	expect.True(t, "a move", moving && from == 4 && to == 8)
}

// TestReshardCarriesALoss: a reshard while Redis's quarantine after a loss
// holds under one of the task's shards is refused (it would take their
// entities out of it); after it, the buckets the entities move to refuse
// the ticks from before the loss, as the one they left does. Without it,
// the nemesis saw a tick run twice: a rolled-back master lost the record
// of tick T's runs, a migrate moved its entities to another master, and
// the fan-out of T, catching up, ran them there again.
func TestReshardCarriesALoss(t *testing.T) {
	c, b := reshardDriver(t)
	for bk := range buckets {
		c.Set(bg, b.k.epoch(bk), epochValue{}.encode(), 0)
	}
	c.HSet(bg, b.k.entities("sync"), "e1", entityValue{Fence: 1}.encode())
	now := time.Now().UnixMilli()
	lost := b.k.epoch(bucketOf("sync"))
	c.Set(bg, lost, epochValue{QuarantineUntil: now + 60_000, LostAt: now}.encode(), 0)
	_, err := b.Reshard(bg, "sync", 4)
	expect.True(t, fmt.Sprintf("refused while the quarantine holds: %v", err), err != nil && strings.Contains(err.Error(), "Redis lost data under some of its shards"))
	c.Set(bg, lost, epochValue{QuarantineUntil: now - 1, LostAt: now}.encode(), 0)
	if _, err := b.Reshard(bg, "sync", 4); err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		v, _ := c.Get(bg, b.k.epoch(bucketOf(driver.ShardName("sync", s)))).Result()
		ep, err := decodeEpoch(v)
		expect.True(t, fmt.Sprintf("shard %d's bucket refuses the ticks before the loss: %q %v", s, v, err), err == nil && ep.LostAt >= now)
	}
}

// reshardDriver is a Redis driver on a Redis of its own, prefix "rs", and
// a client of that Redis.
func reshardDriver(t *testing.T) (*redis.Client, *redisDriver) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	d, err := New(c, "rs", driver.AcksNever)
	if err != nil {
		t.Fatal(err)
	}
	return c, d.(*redisDriver)
}

// TestAShardThatLostItsLayoutGetsItBack: a count first recorded (no
// reshard since: generation 0) outlives the loss of any shard's layout
// key, shard 0's too (a Cluster master restarted empty): the next read of
// a store that is to write puts it back, and a grant named by the count
// is taken. Without shard 0's, every call named by the count was refused
// as named by an old one, for good (the nemesis, seed
// 1795939967246948667: a tick's fan-out retried until shutdown).
func TestAShardThatLostItsLayoutGetsItBack(t *testing.T) {
	c, b := reshardDriver(t)
	if _, err := b.Shards(bg, map[string]int{"sync": 4}); err != nil {
		t.Fatal(err)
	}
	for _, lost := range []int{0, 2} {
		key := b.k.shards(driver.ShardName("sync", lost))
		c.Del(bg, key)
		got, err := b.Shards(bg, map[string]int{"sync": 4})
		expect.True(t, fmt.Sprintf("shard %d's key lost: the count read %v, %v", lost, got, err), err == nil && got["sync"] == 4)
		v, _ := c.Get(bg, key).Result()
		expect.Equal(t, fmt.Sprintf("shard %d's key, put back", lost), v, "4")
	}
}
