package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

func (b *redisDriver) Unlock(ctx context.Context, task, entity, by string, force bool) (driver.Unlocked, bool, error) {
	mode := unlockRevoke
	if force {
		mode = unlockForce
	}
	args := make([]any, unlFixed)
	args[unlField], args[unlBy], args[unlMode] = driver.Escape(entity), driver.Escape(by), mode
	args[unlChan], args[unlTask] = b.k.revoked(), driver.Escape(task)
	res, err := scriptUnlock().Run(ctx, b.c, []string{b.k.entities(task)}, args...).StringSlice()
	if err != nil || len(res) < 5 {
		return driver.Unlocked{}, false, err
	}
	f, _ := strconv.ParseInt(res[2], 10, 64)
	exp, _ := strconv.ParseInt(res[3], 10, 64)
	holder, _ := driver.Unescape(res[0])
	ms, err := b.serverMS(ctx)
	if err != nil {
		ms = exp // the unlock is done; only how long it lasts is unknown
	}
	return driver.Unlocked{
		Held: driver.Held{Task: task, Entity: entity, Holder: holder, Since: fromMS(res[1]), Fence: f,
			TTL: time.Duration(max(0, exp-ms)) * time.Millisecond, Revoked: res[4] == unlockedAlready},
		Freed:   res[4] == unlockedFreed,
		Already: res[4] == unlockedAlready,
	}, true, nil
}

// serverMS reads Redis's clock, against which leases expire.
func (b *redisDriver) serverMS(ctx context.Context) (int64, error) {
	t, err := b.c.Time(ctx).Result()
	return t.UnixMilli(), err
}

// tasks walks the tasks that have a hash: task, or every one for "".
func (b *redisDriver) tasks(ctx context.Context, task string, fn func(task string) error) error {
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
func (b *redisDriver) scan(ctx context.Context, pattern string, fn func(key string) error) error {
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
func (b *redisDriver) entities(ctx context.Context, task string, fn func(task, entity string, e entityValue, now int64) error) error {
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
			rows, err := b.entitiesOf(ctx, task, kv)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if err := fn(task, r.entity, r.e, now); err != nil {
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
func (b *redisDriver) Leases(ctx context.Context, task string, fn func(driver.Held) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, now int64) error {
		if h, ok := e.held(task, entity, now); ok {
			return fn(h)
		}
		return nil
	})
}
func (b *redisDriver) LastRuns(ctx context.Context, task string, fn func(driver.LastRun) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, _ int64) error {
		if r, ok := e.lastRun(task, entity); ok {
			return fn(r)
		}
		return nil
	})
}

// Claim takes name's key for ttl, if no one holds it: the replicas sharing
// a Redis do a thing once between them.
func (b *redisDriver) Claim(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	return b.c.SetNX(ctx, b.k.claim(name), b.cfg.Replica, ttl).Result()
}

// Sweep deletes, a page at a time, the entities neither held nor touched
// within StateTTL (Redis 7.0 has no expiry for hash fields).
func (b *redisDriver) Sweep(ctx context.Context) error {
	return b.tasks(ctx, "", func(task string) error {
		cursor := "0"
		for {
			args := make([]any, swpFixed)
			args[swpCursor], args[swpCount], args[swpStateTTL] = cursor, pageSize, ms(b.cfg.StateTTL)
			res, err := scriptSweep().Run(ctx, b.c, []string{b.k.entities(task)}, args...).Slice()
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
func (b *redisDriver) One(ctx context.Context, task, entity string) (driver.EntityState, error) {
	m := member(task, entity)
	pipe := b.c.Pipeline()
	eg, tm := pipe.HGet(ctx, b.k.entities(task), driver.Escape(entity)), pipe.Time(ctx)
	ix := pipe.HGet(ctx, b.k.entities(task), indexMark+driver.Escape(entity))
	bk := bucketOf(task)
	ds, di := pipe.ZScore(ctx, b.k.due(bk), m), pipe.HGet(ctx, b.k.dueInfo(bk), m)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return driver.EntityState{}, err
	}
	var st driver.EntityState
	e, err := b.entityOf(ctx, task, eg.Val(), ix.Val())
	if err == nil {
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
