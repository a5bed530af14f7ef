package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func (b *redisBackend) unlock(ctx context.Context, task, entity, by string, force bool) (Unlocked, bool, error) {
	mode := unlockRevoke
	if force {
		mode = unlockForce
	}
	res, err := scriptUnlock.Run(ctx, b.c, []string{b.k.entities(task)}, escape(entity), escape(by), mode).StringSlice()
	if err != nil || len(res) < 5 {
		return Unlocked{}, false, err
	}
	f, _ := strconv.ParseInt(res[2], 10, 64)
	exp, _ := strconv.ParseInt(res[3], 10, 64)
	holder, _ := unescape(res[0])
	ms, err := b.serverMS(ctx)
	if err != nil {
		ms = exp // the unlock is done; only how long it lasts is unknown
	}
	return Unlocked{
		Held: Held{Task: task, Entity: entity, Holder: holder, Since: fromMS(res[1]), Fence: f,
			TTL: time.Duration(max(0, exp-ms)) * time.Millisecond, Revoked: res[4] == unlockedAlready},
		Freed:   res[4] == unlockedFreed,
		Already: res[4] == unlockedAlready,
	}, true, nil
}

// serverMS reads Redis's clock, against which leases expire.
func (b *redisBackend) serverMS(ctx context.Context) (int64, error) {
	t, err := b.c.Time(ctx).Result()
	return t.UnixMilli(), err
}

// tasks walks the tasks that have a hash: task, or every one for "".
func (b *redisBackend) tasks(ctx context.Context, task string, fn func(task string) error) error {
	if task != "" {
		return fn(task)
	}
	return b.scan(ctx, b.k.entitiesPattern(), func(k string) error {
		if t, ok := b.k.taskOf(k); ok {
			return fn(t)
		}
		return nil
	})
}

// scan walks the keys that match pattern, a SCAN page at a time: on every
// master of a Cluster, one after the other.
func (b *redisBackend) scan(ctx context.Context, pattern string, fn func(key string) error) error {
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, pattern, pageSize).Result()
			if err != nil {
				return fmt.Errorf("scan %s: %w", pattern, err)
			}
			for _, k := range ks {
				if err := fn(k); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	cc, ok := b.c.(*redis.ClusterClient)
	if !ok {
		return one(ctx, b.c)
	}
	var mu sync.Mutex // fn is called from one master at a time
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return one(ctx, node)
	})
}

// entities walks the entities of task ("" for every task) a page at a time
// (HSCAN), with Redis's clock read once per page.
func (b *redisBackend) entities(ctx context.Context, task string, fn func(task, entity string, e entityValue, now int64) error) error {
	return b.tasks(ctx, task, func(task string) error {
		var cursor uint64
		for {
			kv, next, err := b.c.HScan(ctx, b.k.entities(task), cursor, "", pageSize).Result()
			if err != nil {
				return fmt.Errorf("hscan %s: %w", b.k.entities(task), err)
			}
			now, err := b.serverMS(ctx)
			if err != nil {
				return err
			}
			for i := 0; i+1 < len(kv); i += 2 {
				entity, err := unescape(kv[i])
				e, derr := decodeEntity(kv[i+1])
				if err != nil || derr != nil {
					continue // not ours to understand
				}
				if err := fn(task, entity, e, now); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	})
}

func (b *redisBackend) leases(ctx context.Context, task string, fn func(Held) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, now int64) error {
		if h, ok := e.held(task, entity, now); ok {
			return fn(h)
		}
		return nil
	})
}

func (b *redisBackend) lastRuns(ctx context.Context, task string, fn func(LastRun) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, _ int64) error {
		if r, ok := e.lastRun(task, entity); ok {
			return fn(r)
		}
		return nil
	})
}

// claimSweep takes the sweep key for one interval: the replicas sharing a
// Redis sweep once per interval between them, not once each.
func (b *redisBackend) claimSweep(ctx context.Context, every time.Duration) (bool, error) {
	return b.c.SetNX(ctx, b.k.sweep(), b.opts.Replica, every).Result()
}

// sweep deletes, a page at a time, the entities neither held nor touched
// within StateTTL (Redis 7.0 has no expiry for hash fields).
func (b *redisBackend) sweep(ctx context.Context) error {
	return b.tasks(ctx, "", func(task string) error {
		cursor := "0"
		for {
			res, err := scriptSweep.Run(ctx, b.c, []string{b.k.entities(task)}, cursor, pageSize, ms(b.opts.StateTTL)).Slice()
			if err != nil {
				return fmt.Errorf("sweep %s: %w", task, err)
			}
			if len(res) != 2 {
				return fmt.Errorf("sweep %s: reply has %d entries, want 2", task, len(res))
			}
			if cursor = str(res[0]); cursor == "0" {
				return nil
			}
		}
	})
}

// str turns a script reply element (string or integer) into a string.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// dueEntries walks the due entries of task's bucket (every bucket for ""),
// a page at a time, earliest first within a bucket.
func (b *redisBackend) dueEntries(ctx context.Context, task string, fn func(Due) error) error {
	for bk := range buckets {
		if task != "" && bk != bucketOf(task) {
			continue
		}
		if err := b.bucketDue(ctx, bk, task, fn); err != nil {
			return err
		}
	}
	return nil
}

func (b *redisBackend) bucketDue(ctx context.Context, bk int, task string, fn func(Due) error) error {
	for off := int64(0); ; off += pageSize {
		zs, err := b.c.ZRangeWithScores(ctx, b.k.due(bk), off, off+pageSize-1).Result()
		if err != nil {
			return err
		}
		if len(zs) == 0 {
			return nil
		}
		ms := make([]string, len(zs))
		for i, z := range zs {
			ms[i] = z.Member.(string)
		}
		infos, err := b.c.HMGet(ctx, b.k.dueInfo(bk), ms...).Result()
		if err != nil {
			return err
		}
		for i, z := range zs {
			d, err := parseDue(ms[i], str(infos[i]), strconv.FormatFloat(z.Score, 'f', 0, 64))
			if err != nil || (task != "" && d.Task != task) {
				continue
			}
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(zs) < pageSize {
			return nil
		}
	}
}

func (b *redisBackend) one(ctx context.Context, task, entity string) (EntityState, error) {
	m := member(task, entity)
	pipe := b.c.Pipeline()
	eg, tm := pipe.HGet(ctx, b.k.entities(task), escape(entity)), pipe.Time(ctx)
	bk := bucketOf(task)
	ds, di := pipe.ZScore(ctx, b.k.due(bk), m), pipe.HGet(ctx, b.k.dueInfo(bk), m)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return EntityState{}, err
	}
	var st EntityState
	if e, err := decodeEntity(eg.Val()); err == nil {
		if h, ok := e.held(task, entity, tm.Val().UnixMilli()); ok {
			st.Held = &h
		}
		if r, ok := e.lastRun(task, entity); ok {
			st.Last = &r
		}
	}
	if ds.Err() == nil {
		if d, err := parseDue(m, di.Val(), strconv.FormatFloat(ds.Val(), 'f', 0, 64)); err == nil {
			st.Pending = &d
		}
	}
	return st, nil
}

func (b *redisBackend) dueCount(ctx context.Context) (int, error) {
	pipe := b.c.Pipeline()
	cards := make([]*redis.IntCmd, buckets)
	for bk := range cards {
		cards[bk] = pipe.ZCard(ctx, b.k.due(bk))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cards {
		n += int(c.Val())
	}
	return n, nil
}

func (b *redisBackend) setPaused(ctx context.Context, task, info string) error {
	// Two slots on a Cluster: no transaction. The info is written first,
	// so a task in the set has its info.
	pipe := b.c.Pipeline()
	if info != "" {
		pipe.HSet(ctx, b.k.pauses(), task, info)
		pipe.SAdd(ctx, b.k.paused(), task)
	} else {
		pipe.SRem(ctx, b.k.paused(), task)
		pipe.HDel(ctx, b.k.pauses(), task)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (b *redisBackend) registerTasks(ctx context.Context, vals map[string]string) error {
	return b.c.HSet(ctx, b.k.registry(), vals).Err()
}

func (b *redisBackend) registry(ctx context.Context) (map[string]string, error) {
	return b.c.HGetAll(ctx, b.k.registry()).Result()
}

func (b *redisBackend) forgetTask(ctx context.Context, task string) (bool, error) {
	n, err := b.c.HDel(ctx, b.k.registry(), task).Result()
	return n > 0, err
}

// paused reads the paused set and the pauses' infos: a task in the set
// without one (paused by an older tickd) gets "".
func (b *redisBackend) paused(ctx context.Context) (map[string]string, error) {
	pipe := b.c.Pipeline()
	set := pipe.SMembers(ctx, b.k.paused())
	infos := pipe.HGetAll(ctx, b.k.pauses())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	m := make(map[string]string, len(set.Val()))
	for _, t := range set.Val() {
		m[t] = infos.Val()[t]
	}
	return m, nil
}

func (b *redisBackend) ping(ctx context.Context) error { return b.c.Ping(ctx).Err() }

func (b *redisBackend) announce(ctx context.Context, a announceValue, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil { // a replica that refuses the layout is not running
		return err
	}
	own := make([]bool, buckets)
	for _, t := range a.Tasks {
		own[bucketOf(t)] = true
	}
	b.own.Store(&own)
	r, err := scriptAnnounce.Run(ctx, b.c, []string{b.k.replicas()}, escape(b.opts.Replica), ms(ttl),
		a.tasksField(), a.Process, escape(a.Host), escape(a.Version), strconv.FormatInt(b.announced.Load(), 10)).Text()
	if err != nil {
		return err
	}
	f := strings.Split(r, "|")
	if now, err := number(f[len(f)-1]); err == nil {
		b.announced.Store(now)
	}
	if f[0] == "dup" && len(f) == 4 {
		host, _ := unescape(f[1])
		n, _ := number(f[2])
		// Kept for the console's replicas page, while it goes on (the two
		// processes find each other every announcement or two).
		now, _ := number(f[3])
		b.c.HSet(ctx, b.k.duplicates(), escape(b.opts.Replica), f[1]+"|"+strconv.FormatInt(now+3*ttl.Milliseconds(), 10)) //nolint:errcheck // the warning is logged either way
		return &DuplicateReplicaError{Replica: b.opts.Replica, Host: host, Since: msTime(n)}
	}
	return nil
}

func (b *redisBackend) replicas(ctx context.Context) ([]Replica, error) {
	pipe := b.c.Pipeline()
	allCmd, dupCmd := pipe.HGetAll(ctx, b.k.replicas()), pipe.HGetAll(ctx, b.k.duplicates())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	all, dups := allCmd.Val(), dupCmd.Val()
	now, err := b.serverMS(ctx)
	if err != nil {
		return nil, err
	}
	var rs []Replica
	for id, v := range all {
		a, err := decodeAnnounce(v)
		if err != nil || a.Until < now {
			continue
		}
		name, _ := unescape(id)
		r := Replica{ID: name, Host: a.Host, Version: a.Version, Tasks: a.Tasks, Since: msTime(a.Since), Seen: msTime(a.Seen)}
		if host, until, ok := strings.Cut(dups[id], "|"); ok {
			if n, err := number(until); err == nil && n >= now {
				r.DuplicateOn, _ = unescape(host)
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func (b *redisBackend) known(ctx context.Context, task string) (bool, error) {
	n, err := scriptKnown.Run(ctx, b.c, []string{b.k.replicas()}, escape(task)).Int()
	return n == 1, err
}

// InitEpoch declares that this Redis holds no lease any process could still
// trust, so the data-loss quarantine does not apply to it. Use it only on a
// Redis that is new to tickd (tests, a fresh deployment); after a real data
// loss, let the quarantine run its course.
func (s *Store) InitEpoch(ctx context.Context) error {
	b, ok := s.b.(*redisBackend)
	if !ok {
		return nil
	}
	pipe := b.c.Pipeline()
	for bk := range buckets {
		pipe.SetNX(ctx, b.k.epoch(bk), epochValue{}.encode(), 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
