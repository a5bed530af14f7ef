package redisdriver

import (
	"errors"
	"fmt"
	"testing"
	"time"

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
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	d, err := New(c, "rs", driver.AcksNever)
	if err != nil {
		t.Fatal(err)
	}
	b := d.(*redisDriver)
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
		return v == movingMark(1, 8)
	})
	_, err = b.Reshard(bg, "sync", 4)
	expect.True(t, fmt.Sprintf("the second is refused as the first moves: %v", err), errors.Is(err, errMigrating))
	expect.True(t, "the first one ends well", <-first == nil)
	got, _ := c.Get(bg, b.k.shards("sync")).Result()
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
