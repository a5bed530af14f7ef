package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// A task's shard count is kept in every shard's slot, under the shard's
// layout key (keys.shards of the shard's name), and each one says the
// whole layout: the count, and whether the shard is one of it. Each script
// that grants, renews, releases or enqueues is handed the count its caller
// named the shard by and refuses the call when the shard's key says
// otherwise (lib.lua's shards_refused): a replica that read the count
// before a reshard cannot act on the old layout, whatever it cached.
// Values:
//
//	N          the shard is one of N (shard 0: the task is kept in N)
//	x:N        the task is kept in N, and this shard is not one of them
//	m:FROM:TO  tickd migrate is moving the task from FROM shards to TO
//	(none)     the count was never recorded: one shard, shard 0 only
//
// Each value a reshard writes ends in @G, its generation: higher for each
// reshard (and for its end than for its mark), and no key is written over
// by an older generation (setlayout.lua). The layout is the newest
// generation's, whichever shard says it: on a Cluster, a master restarted
// from an older snapshot takes its shards' keys back to the layout before
// a reshard while the other masters keep the new one, and a store that
// read the old count in its shard 0 would be refused by the others for
// good (the nemesis, seed 1795915241434977779). A store that is to write
// puts the newest layout back into the keys that lost it. Values without
// a generation (a tickd before them, or a count first recorded) are
// generation 0, and then shard 0's is the count.

// A layout is a task's layout as its keys say it.
type layout struct {
	n        int // the count; 0: none recorded (or moving)
	from, to int // the move under way, when moving
	moving   bool
	gen      int64
	stale    []int // shards whose key has an older generation, or none
}

// value is the value shard s's key is to hold under l.
func (l layout) value(s int) string {
	v := strconv.Itoa(l.n)
	switch {
	case l.moving:
		v = movingMark(l.from, l.to)
	case s >= l.n:
		v = "x:" + v
	}
	return withGen(v, l.gen)
}

// withGen is layout value v of generation gen.
func withGen(v string, gen int64) string {
	if gen <= 0 {
		return v
	}
	return v + "@" + strconv.FormatInt(gen, 10)
}

// splitGen reads a layout value's generation: 0 for a value without one,
// -1 for one that cannot be read.
func splitGen(v string) (string, int64) {
	base, g, ok := strings.Cut(v, "@")
	if !ok {
		return v, 0
	}
	gen, err := strconv.ParseInt(g, 10, 64)
	if err != nil || gen < 0 {
		return base, -1
	}
	return base, gen
}

// movingMark is a layout value while a reshard moves the task.
func movingMark(from, to int) string { return "m:" + strconv.Itoa(from) + ":" + strconv.Itoa(to) }

// parseShards reads a layout value without its generation: the count, or
// the move under way (from, to) with moving true. n is 0 for no value or
// one this code cannot read, and so is a count outside 1..MaxShards: a
// number read from Redis is bounded before it sizes anything.
func parseShards(v string) (n, from, to int, moving bool) {
	if rest, ok := strings.CutPrefix(v, "m:"); ok {
		f, t, _ := strings.Cut(rest, ":")
		from, ferr := strconv.Atoi(f)
		to, terr := strconv.Atoi(t)
		if ferr == nil && terr == nil && validShards(from) && validShards(to) {
			return 0, from, to, true
		}
		return 0, 0, 0, false
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(v, "x:")); err == nil && validShards(n) {
		return n, 0, 0, false
	}
	return 0, 0, 0, false
}

// validShards says whether n is a shard count tickd can keep a task in.
func validShards(n int) bool { return n >= 1 && n <= driver.MaxShards }

// layoutReadWait bounds the wait for the masters of a task's 64 layout
// keys: on a Cluster, a master that died (and is not replaced yet) holds
// its keys' answers back for seconds of dial attempts, and a count read
// (a trigger's, a store's first) would wait for it though the task's own
// master answers at once.
const layoutReadWait = 500 * time.Millisecond

// readLayouts reads the layout keys of every shard of each of tasks: those
// that answer within layoutReadWait; if none does, shard 0's alone, as
// long as ctx lets it (a Redis slow to answer every key).
func (b *redisDriver) readLayouts(ctx context.Context, tasks []string) ([]layout, error) {
	ls, err := b.readLayoutsWithin(ctx, tasks, layoutReadWait)
	if err == nil {
		return ls, nil
	}
	return b.readLayoutsWithin(ctx, tasks, 0)
}

// readLayoutsWithin reads the layout keys of tasks' shards, every one
// (within wait), or shard 0's alone (wait 0).
func (b *redisDriver) readLayoutsWithin(ctx context.Context, tasks []string, wait time.Duration) ([]layout, error) {
	shards := driver.MaxShards
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	} else {
		shards = 1
	}
	pipe := b.c.Pipeline()
	got := make([][driver.MaxShards]*redis.StringCmd, len(tasks))
	for i, t := range tasks {
		for s := range shards { // one key per command: the shards live in different slots
			got[i][s] = pipe.Get(ctx, b.k.shards(driver.ShardName(t, s)))
		}
	}
	pipe.Exec(ctx) //nolint:errcheck // each command keeps its own error
	out := make([]layout, len(tasks))
	for i := range tasks {
		var vals [driver.MaxShards]string
		var read [driver.MaxShards]bool
		var firstErr error
		for s, g := range got[i][:shards] {
			switch err := g.Err(); {
			case err == nil || errors.Is(err, redis.Nil):
				vals[s], read[s] = g.Val(), true
			case firstErr == nil:
				firstErr = err
			}
		}
		if !slices.Contains(read[:], true) {
			return nil, firstErr
		}
		out[i] = layoutOf(vals, read)
	}
	return out, nil
}

// layoutOf is the layout the values of a task's layout keys say ("": no
// key), of those read (a Cluster master that does not answer leaves its
// shards' keys unread: the others say the layout, and none of its keys is
// stale): the newest generation's; among values of generation 0, shard
// 0's, or another shard's when shard 0 has none.
func layoutOf(vals [driver.MaxShards]string, read [driver.MaxShards]bool) layout {
	best, bestGen := -1, int64(-1)
	gens := make([]int64, len(vals))
	for s, v := range vals {
		if !read[s] {
			gens[s] = math.MaxInt64 // not stale: unknown
			continue
		}
		base, g := splitGen(v)
		n, _, _, moving := parseShards(base)
		if v == "" || g < 0 || (n == 0 && !moving) {
			gens[s] = -1
			continue
		}
		gens[s] = g
		if g > bestGen {
			best, bestGen = s, g
		}
	}
	if best < 0 {
		return layout{}
	}
	base, _ := splitGen(vals[best])
	var l layout
	l.n, l.from, l.to, l.moving = parseShards(base)
	l.gen = bestGen
	if bestGen == 0 {
		return l
	}
	for s, g := range gens {
		if g < bestGen {
			l.stale = append(l.stale, s)
		}
	}
	return l
}

// repairLayout writes l's values into the keys of task's shards that hold
// an older generation: over an older one only, so never over a reshard
// that began since l was read.
func (b *redisDriver) repairLayout(ctx context.Context, task string, l layout) error {
	if len(l.stale) == 0 {
		return nil
	}
	calls := make([]scriptCall, len(l.stale))
	for i, s := range l.stale {
		calls[i] = scriptCall{keys: []string{b.k.shards(driver.ShardName(task, s))}, args: []any{l.value(s), l.gen, "lt"}}
	}
	for _, cmd := range evalEach(ctx, b.c, scriptLayout(), calls) {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("put the layout of %s back in its shards: %w", task, err)
		}
	}
	return nil
}

// setLayout writes l into the layout key of each of task's MaxShards
// shards, shard 0 last, and that one only while lock is held. A key that
// holds a newer generation (a reshard that took the lock when this one's
// expired) stops it with errLockLost.
func (b *redisDriver) setLayout(ctx context.Context, task string, l layout, lock *migrateLock) error {
	calls := make([]scriptCall, 0, driver.MaxShards-1)
	for s := driver.MaxShards - 1; s >= 1; s-- {
		calls = append(calls, scriptCall{keys: []string{b.k.shards(driver.ShardName(task, s))}, args: []any{l.value(s), l.gen, "le"}})
	}
	for _, cmd := range evalEach(ctx, b.c, scriptLayout(), calls) {
		if wrote, err := cmd.Int(); err != nil {
			return err
		} else if wrote == 0 {
			return errLockLost
		}
	}
	var wrote *redis.Cmd
	err := lock.whileHeld(ctx, func(tx redis.Pipeliner) {
		wrote = scriptLayout().Eval(ctx, tx, []string{b.k.shards(task)}, l.value(0), l.gen, "le")
	})
	if err != nil {
		return err
	}
	if n, err := wrote.Int(); err != nil || n == 1 {
		return err
	}
	return errLockLost
}

// ensureShardKeys gives shards 0..n-1 of task their layout key if they
// have none (a count recorded by a tickd before layout keys, a master that
// lost its data): a shard without one refuses a count above 1. A key set already is left alone,
// so a store that read the count before a reshard cannot bring the old one
// back.
func (b *redisDriver) ensureShardKeys(ctx context.Context, task string, n int) error {
	if n <= 1 {
		return nil
	}
	pipe := b.c.Pipeline()
	for s := range n { // one key per command: the shards live in different slots
		// Shard 0's too: a Cluster master that lost its data lost the key
		// of each shard it held, and a shard 0 without one says "one
		// shard", which refused every call named by n, for good (the
		// nemesis, seed 1795939967246948667).
		pipe.SetNX(ctx, b.k.shards(driver.ShardName(task, s)), n, 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
