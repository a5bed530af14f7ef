package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// shardsArg is a script's shard-count argument: "" for a call not checked.
func shardsArg(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// shardsErr turns a script's refusal (shards_refused) into
// driver.ErrShardsChanged.
func shardsErr(err error) error {
	if err != nil && redis.HasErrorPrefix(err, shardsChanged) {
		return driver.ErrShardsChanged
	}
	return err
}

// Reshard keeps task in to shards from now on, while replicas run it:
//  1. every shard's layout key gets the move's mark, so that no script
//     grants, renews, releases or enqueues anything of the task (each
//     refuses, and its store tries again once the move is over);
//  2. each entity's state (its lease, held or not, its last run, fence and
//     tick), its queued follow-up and its pending requests move to the
//     shard the new count puts it in, from every one of the MaxShards
//     shards (a shard beyond the old count may hold what an earlier tickd
//     left there);
//  3. every layout key gets the new count: the stores read it again and
//     name each entity's shard anew, and a holder's renewals and release
//     find its lease where it moved.
//
// A Reshard cut short leaves the mark: nothing of the task is granted
// until Reshard runs again, which carries the move on.
//
// One Reshard of a task at a time: each holds the task's migrating lock
// for the whole move (renewed while it goes on), and another finds it held
// and refuses; the count is written (shard 0's, the one every store reads)
// only while the lock is still the move's.
func (b *redisDriver) Reshard(ctx context.Context, task string, to int) (driver.Resharded, error) {
	r := driver.Resharded{Task: task, To: to}
	if to < 1 || to > driver.MaxShards {
		return r, fmt.Errorf("lease: reshard %s: %d shards: use 1..%d", task, to, driver.MaxShards)
	}
	lock, err := b.lockMigrate(ctx, task)
	if err != nil {
		return r, err
	}
	defer lock.release()
	r, err = b.reshard(lock.ctx, lock, r)
	if err != nil && errors.Is(context.Cause(lock.ctx), errLockLost) {
		err = fmt.Errorf("lease: reshard %s: %w", task, errLockLost)
	}
	return r, err
}

func (b *redisDriver) reshard(ctx context.Context, lock *migrateLock, r driver.Resharded) (driver.Resharded, error) {
	task, to := r.Task, r.To
	ls, err := b.readLayouts(ctx, []string{task})
	if err != nil {
		return r, err
	}
	was := ls[0]
	r.From = max(was.n, 1)
	if was.moving {
		r.From = was.from
	}
	if !was.moving && r.From == to {
		if strays, err := b.strays(ctx, task, to); err != nil || !strays {
			return r, err // in place: nothing to move, nothing stopped
		}
	}
	loss, err := b.lossUnder(ctx, task)
	if err != nil {
		return r, err
	}
	if loss.left > 0 {
		return r, fmt.Errorf("lease: reshard %s: Redis lost data under some of its shards (nothing of them is granted for %v more): a move now would take their entities out of that quarantine; run tickd migrate again then", task, loss.left.Round(time.Second))
	}
	now, err := b.c.Time(ctx).Result()
	if err != nil {
		return r, err
	}
	// The move's generation: above every one written, and above any an
	// earlier reshard whose lock expired can still write (its clock was
	// earlier by the lock's TTL at least).
	gen := max(now.UnixMilli(), was.gen+2)
	if err := b.setLayout(ctx, task, layout{moving: true, from: r.From, to: to, gen: gen}, lock); err != nil {
		return r, fmt.Errorf("mark %s as moving: %w", task, err)
	}
	for s := range driver.MaxShards {
		if err := b.reshardOne(ctx, &r, driver.ShardName(task, s)); err != nil {
			return r, err
		}
	}
	if err := b.raiseLost(ctx, task, to, loss.at); err != nil {
		return r, err
	}
	return r, b.setLayout(ctx, task, layout{n: to, gen: gen + 1}, lock)
}

// shardLoss is what the epochs under a task's shards say of a data loss:
// the latest one (ms, Redis's clock; 0: none) and the quarantine left.
type shardLoss struct {
	at   int64
	left time.Duration
}

// lossUnder reads the epochs of the buckets of task's MaxShards shards. An
// epoch missing (a bucket no store prepared yet, or one that lost it and
// no grant looked since) says nothing.
func (b *redisDriver) lossUnder(ctx context.Context, task string) (shardLoss, error) {
	var l shardLoss
	pipe := b.c.Pipeline()
	seen := map[int]bool{}
	var gets []*redis.StringCmd
	for s := range driver.MaxShards {
		if bk := bucketOf(driver.ShardName(task, s)); !seen[bk] {
			seen[bk] = true
			gets = append(gets, pipe.Get(ctx, b.k.epoch(bk)))
		}
	}
	now := pipe.Time(ctx)
	pipe.Exec(ctx) //nolint:errcheck // each command keeps its own error
	if err := now.Err(); err != nil {
		return l, err
	}
	for _, g := range gets {
		v, err := g.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return l, err
		}
		ep, err := decodeEpoch(v)
		if err != nil {
			return l, err
		}
		l.at = max(l.at, ep.LostAt)
		l.left = max(l.left, time.UnixMilli(ep.QuarantineUntil).Sub(now.Val()))
	}
	return l, nil
}

// raiseLost makes the buckets of task's shards 0..n-1, where a reshard
// puts its entities, refuse tick runs from before lostAt, the latest loss
// under any of its shards: an entity moved from a bucket that lost the
// record of a tick's run keeps that tick from running again.
func (b *redisDriver) raiseLost(ctx context.Context, task string, n int, lostAt int64) error {
	if lostAt <= 0 {
		return nil
	}
	seen := map[int]bool{}
	var calls []scriptCall
	for s := range n {
		if bk := bucketOf(driver.ShardName(task, s)); !seen[bk] {
			seen[bk] = true
			calls = append(calls, scriptCall{keys: []string{b.k.epoch(bk)}, args: []any{lostAt}})
		}
	}
	for _, cmd := range evalEach(ctx, b.c, scriptRaise(), calls) {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("carry the loss of %s's shards: %w", task, err)
		}
	}
	return nil
}

// strays says whether a shard of task at or beyond n holds state, or a
// shard below it has no layout key (a count recorded by a tickd before
// layout keys, or keys lost): a reshard to n then has work to do.
func (b *redisDriver) strays(ctx context.Context, task string, n int) (bool, error) {
	pipe := b.c.Pipeline()
	var found []*redis.IntCmd
	for s := range driver.MaxShards {
		name := driver.ShardName(task, s)
		if s < n {
			if s > 0 {
				found = append(found, pipe.Exists(ctx, b.k.shards(name)))
			}
			continue
		}
		found = append(found, pipe.Exists(ctx, b.k.entities(name)), pipe.Exists(ctx, b.k.followups(name)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	for i, f := range found {
		if got := f.Val() > 0; got != (i < n-1) {
			return true, nil
		}
	}
	return false, nil
}

// reshardOne moves what shard name holds of entities another shard now
// keeps. An entity found in its new shard already (left there by an
// earlier layout) keeps the state with the higher fence.
func (b *redisDriver) reshardOne(ctx context.Context, r *driver.Resharded, name string) error {
	if err := b.detachAll(ctx, b.k.entities(name)); err != nil {
		return err
	}
	dest := func(field string) (string, bool) {
		if strings.HasPrefix(field, chunkMark) || strings.HasPrefix(field, indexMark) {
			return "", false // a chunk's record or index: none is left (detachAll)
		}
		e, err := driver.Unescape(field)
		d := driver.ShardName(r.Task, driver.ShardOf(e, r.To))
		return d, err == nil && d != name
	}
	for _, h := range []struct {
		key    func(string) string
		n      *int
		entity bool
	}{{b.k.entities, &r.Entities, true}, {b.k.followups, &r.FollowUps, false}} {
		var cursor uint64
		for {
			kv, next, err := b.c.HScan(ctx, h.key(name), cursor, "", pageSize).Result()
			if err != nil {
				return err
			}
			if err := b.moveFields(ctx, h.key, name, kv, dest, h.entity, h.n); err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return b.reshardDue(ctx, r, name, dest)
}

// moveFields moves the fields of one HSCAN page of shard name's hash (kv:
// field, value pairs) whose entity dest puts in another shard.
func (b *redisDriver) moveFields(ctx context.Context, key func(string) string, name string, kv []string, dest func(string) (string, bool), entity bool, n *int) error {
	type move struct{ field, val, to string }
	var moves []move
	for i := 0; i+1 < len(kv); i += 2 {
		if d, ok := dest(kv[i]); ok {
			moves = append(moves, move{kv[i], kv[i+1], d})
		}
	}
	if len(moves) == 0 {
		return nil
	}
	pipe := b.c.Pipeline()
	there := make([]*redis.StringCmd, len(moves))
	for i, m := range moves { // one key per command: the shards may be on different masters
		there[i] = pipe.HGet(ctx, key(m.to), m.field)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	pipe = b.c.Pipeline()
	for i, m := range moves {
		if old, err := there[i].Result(); err == nil && (!entity || !newer(m.val, old)) {
			pipe.HDel(ctx, key(name), m.field) // the state where it is now stands
			continue
		}
		pipe.HSet(ctx, key(m.to), m.field, m.val)
		pipe.HDel(ctx, key(name), m.field)
		*n++
	}
	_, err := pipe.Exec(ctx)
	return err
}

// newer says whether entity value a has a higher fence than b (or b cannot
// be read).
func newer(a, b string) bool {
	ea, aerr := decodeEntity(a)
	eb, berr := decodeEntity(b)
	return aerr == nil && (berr != nil || ea.Fence > eb.Fence)
}

// reshardDue moves shard name's pending requests, taken or not, to their
// entities' new shards.
func (b *redisDriver) reshardDue(ctx context.Context, r *driver.Resharded, name string, dest func(string) (string, bool)) error {
	bk := bucketOf(name)
	zs, err := b.c.ZRangeWithScores(ctx, b.k.due(bk), 0, -1).Result()
	if err != nil {
		return err
	}
	pipe := b.c.Pipeline()
	woken := map[int]bool{}
	for _, z := range zs {
		m := z.Member.(string)
		task, entity, err := splitMember(m)
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
		nm, nbk := member(d, entity), bucketOf(d)
		pipe.ZAdd(ctx, b.k.due(nbk), redis.Z{Score: z.Score, Member: nm})
		pipe.HSet(ctx, b.k.dueInfo(nbk), nm, info)
		pipe.ZRem(ctx, b.k.due(bk), m)
		pipe.HDel(ctx, b.k.dueInfo(bk), m)
		woken[nbk] = true
		r.Due++
	}
	for nbk := range woken { // the due polls that wait for their buckets' entries look now
		pipe.Publish(ctx, b.k.dueWake(), strconv.Itoa(nbk)+" 0")
	}
	_, err = pipe.Exec(ctx)
	return err
}
