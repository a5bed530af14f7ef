package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// Reshard keeps task in to shards from now on: each entity's state (its
// lease, last run, fence and tick), its queued follow-up and its pending
// request move to the shard the new count puts it in, then the count is
// recorded. It refuses while a replica announces the task: a replica
// running it would look for an entity where it no longer is. A Reshard cut
// short is run again (what moved stays moved; the count, recorded last,
// is still the old one, whose shards are read again).
func (b *Driver) Reshard(ctx context.Context, task string, to int) (driver.Resharded, error) {
	r := driver.Resharded{Task: task, To: to}
	if to < 1 || to > driver.MaxShards {
		return r, fmt.Errorf("lease: reshard %s: %d shards: use 1..%d", task, to, driver.MaxShards)
	}
	running, err := b.Known(ctx, task)
	if err != nil {
		return r, err
	}
	if running {
		return r, fmt.Errorf("%w: a replica runs %s: take it out of every replica's config (or stop them) first", ErrReplicasRunning, task)
	}
	got, err := b.c.Get(ctx, b.k.shards(task)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return r, err
	}
	r.From = 1
	if n, err := strconv.Atoi(got); err == nil && n > 0 {
		r.From = n
	}
	if r.From != to {
		for s := range r.From {
			if err := b.reshardOne(ctx, &r, driver.ShardName(task, s)); err != nil {
				return r, err
			}
		}
	}
	return r, b.c.Set(ctx, b.k.shards(task), to, 0).Err()
}

// reshardOne moves what shard name holds of entities another shard now
// keeps.
func (b *Driver) reshardOne(ctx context.Context, r *driver.Resharded, name string) error {
	dest := func(field string) (string, bool) {
		e, err := driver.Unescape(field)
		d := driver.ShardName(r.Task, driver.ShardOf(e, r.To))
		return d, err == nil && d != name
	}
	for _, h := range []struct {
		key func(string) string
		n   *int
	}{{b.k.entities, &r.Entities}, {b.k.followups, &r.FollowUps}} {
		var cursor uint64
		for {
			kv, next, err := b.c.HScan(ctx, h.key(name), cursor, "", pageSize).Result()
			if err != nil {
				return err
			}
			pipe := b.c.Pipeline()
			for i := 0; i+1 < len(kv); i += 2 {
				if d, ok := dest(kv[i]); ok {
					pipe.HSet(ctx, h.key(d), kv[i], kv[i+1]) // one key per command: the shards may be on different masters
					pipe.HDel(ctx, h.key(name), kv[i])
					*h.n++
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return b.reshardDue(ctx, r, name, dest)
}

// reshardDue moves shard name's pending requests, taken or not, to their
// entities' new shards.
func (b *Driver) reshardDue(ctx context.Context, r *driver.Resharded, name string, dest func(string) (string, bool)) error {
	bk := bucketOf(name)
	zs, err := b.c.ZRangeWithScores(ctx, b.k.due(bk), 0, -1).Result()
	if err != nil {
		return err
	}
	pipe := b.c.Pipeline()
	for _, z := range zs {
		m := z.Member.(string)
		task, entity, err := driver.SplitMember(m)
		if err != nil || task != name {
			continue
		}
		d, ok := dest(driver.Escape(entity))
		if !ok {
			continue
		}
		info, err := b.c.HGet(ctx, b.k.dueInfo(bk), m).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		nm, nbk := driver.Member(d, entity), bucketOf(d)
		pipe.ZAdd(ctx, b.k.due(nbk), redis.Z{Score: z.Score, Member: nm})
		pipe.HSet(ctx, b.k.dueInfo(nbk), nm, info)
		pipe.ZRem(ctx, b.k.due(bk), m)
		pipe.HDel(ctx, b.k.dueInfo(bk), m)
		r.Due++
	}
	_, err = pipe.Exec(ctx)
	return err
}
