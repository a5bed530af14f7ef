package redisdriver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// pauseRecord is a driver.PauseInfo as the pauses' hash keeps it, in JSON.
type pauseRecord struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
}

func (b *redisDriver) SetPaused(ctx context.Context, task string, p *driver.PauseInfo) error {
	// Two slots on a Cluster: no transaction. The info is written first,
	// so a task in the set has its info.
	pipe := b.c.Pipeline()
	if p != nil {
		pipe.HSet(ctx, b.k.pauses(), task, jsonValue(pauseRecord(*p)))
		pipe.SAdd(ctx, b.k.paused(), task)
	} else {
		pipe.SRem(ctx, b.k.paused(), task)
		pipe.HDel(ctx, b.k.pauses(), task)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// EndPause removes a pause whose end passed, if it is still p (as its
// JSON: Paused's decoding, encoded again, is what it read): its info first (one script on the hash: a pause made since is
// left alone), then its member of the set. On a Cluster the two keys may
// live on two masters: a pause ended so is gone before either loses its
// data, so that a master restarted empty cannot leave the task in the set
// without its info (which reads as a pause with no end).
func (b *redisDriver) EndPause(ctx context.Context, task string, p driver.PauseInfo) error {
	n, err := scriptEndPause().Run(ctx, b.c, []string{b.k.pauses()}, task, jsonValue(pauseRecord(p))).Int()
	if err != nil || n == 0 {
		return err
	}
	return b.c.SRem(ctx, b.k.paused(), task).Err()
}

// Paused reads the paused set and the pauses' infos.
func (b *redisDriver) Paused(ctx context.Context) (map[string]driver.PauseInfo, error) {
	pipe := b.c.Pipeline()
	set := pipe.SMembers(ctx, b.k.paused())
	infos := pipe.HGetAll(ctx, b.k.pauses())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	m := make(map[string]driver.PauseInfo, len(set.Val()))
	for _, t := range set.Val() {
		// A member without its info lost it with its master's data (a
		// Cluster keeps the two in two slots): a data loss ends a pause,
		// as where one Redis loses both. Left in the set: a pause being
		// made may have its member written before its info.
		if info, ok := infos.Val()[t]; ok {
			var p pauseRecord
			json.Unmarshal([]byte(info), &p) //nolint:errcheck // an info not understood: paused, by nobody known, with no end
			m[t] = driver.PauseInfo(p)
		}
	}
	return m, nil
}

// taskRecord is a driver.TaskInfo as the registry's hash keeps it, in JSON.
type taskRecord struct {
	Name     string    `json:"name"`
	Schedule string    `json:"schedule"`
	Timezone string    `json:"timezone"`
	Seen     time.Time `json:"seen"`
	By       string    `json:"by"`
}

// RegisterTasks keeps each task's info as JSON, a field of the registry's
// hash by name.
func (b *redisDriver) RegisterTasks(ctx context.Context, ts []driver.TaskInfo) error {
	vals := make(map[string]any, len(ts))
	for _, t := range ts {
		vals[t.Name] = jsonValue(taskRecord(t))
	}
	return b.c.HSet(ctx, b.k.registry(), vals).Err()
}

func (b *redisDriver) Registry(ctx context.Context) ([]driver.TaskInfo, error) {
	vals, err := b.c.HGetAll(ctx, b.k.registry()).Result()
	if err != nil {
		return nil, err
	}
	out := make([]driver.TaskInfo, 0, len(vals))
	for name, v := range vals {
		var t taskRecord
		if json.Unmarshal([]byte(v), &t) != nil {
			t = taskRecord{} // another version's: its name is still known
		}
		t.Name = name
		out = append(out, driver.TaskInfo(t))
	}
	return out, nil
}

func (b *redisDriver) ForgetTask(ctx context.Context, task string) (bool, error) {
	n, err := b.c.HDel(ctx, b.k.registry(), task).Result()
	return n > 0, err
}

func (b *redisDriver) Shards(ctx context.Context, want map[string]int) (map[string]int, error) {
	tasks := slices.Sorted(maps.Keys(want))
	ls, err := b.readLayouts(ctx, tasks)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(tasks))
	var unset []string
	for i, t := range tasks {
		l := ls[i]
		switch {
		case l.moving:
			return nil, fmt.Errorf("%w: %s, from %d shards to %d (tickd migrate)", driver.ErrResharding, t, l.from, l.to)
		case l.n > 0:
			out[t] = l.n
			if want[t] > 0 { // a store that is to write: every shard says the layout
				if err := b.keepLayout(ctx, t, l); err != nil {
					return nil, err
				}
			}
		case want[t] > 0:
			unset = append(unset, t)
		}
	}
	if len(unset) > 0 {
		if err := b.recordShards(ctx, want, unset, out); err != nil {
			return nil, err
		}
		for _, t := range unset {
			if err := b.ensureShardKeys(ctx, t, out[t]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// keepLayout makes every shard of task say l: a reshard's layout
// (generation > 0) is put back where it was lost (repairLayout); a count
// of a tickd before generations gives its shards their keys if they have
// none (ensureShardKeys).
func (b *redisDriver) keepLayout(ctx context.Context, task string, l layout) error {
	if l.gen > 0 {
		return b.repairLayout(ctx, task, l)
	}
	return b.ensureShardKeys(ctx, task, l.n)
}

// recordShards records the count of each of tasks, none of whose shards
// has one, into out: its want, or 1 for a task with state from a tickd
// before shards (in the task's one shard). The first writer wins: every
// replica reads its count.
func (b *redisDriver) recordShards(ctx context.Context, want map[string]int, tasks []string, out map[string]int) error {
	pipe := b.c.Pipeline()
	had := make([]*redis.IntCmd, len(tasks))
	for i, t := range tasks {
		had[i] = pipe.Exists(ctx, b.k.entities(t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	pipe = b.c.Pipeline()
	after := make([]*redis.StringCmd, len(tasks))
	for i, t := range tasks { // one key per command: they may live on different shards
		n := want[t]
		if had[i].Val() > 0 {
			n = 1
		}
		pipe.SetNX(ctx, b.k.shards(t), n, 0)
		after[i] = pipe.Get(ctx, b.k.shards(t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, t := range tasks {
		base, _ := splitGen(after[i].Val())
		n, from, to, moving := parseShards(base)
		if moving {
			return fmt.Errorf("%w: %s, from %d shards to %d (tickd migrate)", driver.ErrResharding, t, from, to)
		}
		if n <= 0 {
			return fmt.Errorf("the shard count of %s: %q", t, after[i].Val())
		}
		out[t] = n
	}
	return nil
}

func (b *redisDriver) Ping(ctx context.Context) error { return b.c.Ping(ctx).Err() }

func (b *redisDriver) Announce(ctx context.Context, a driver.Announcement, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil { // a replica that refuses the layout is not running
		return err
	}
	own := make([]bool, buckets)
	for _, t := range a.Tasks {
		own[bucketOf(t)] = true
	}
	for _, t := range a.Shards {
		own[bucketOf(t)] = true
	}
	if prev := b.own.Swap(&own); prev == nil || !slices.Equal(*prev, own) {
		b.nextLook.Store(0) // buckets not looked at yet: at the next poll
	}
	args := make([]any, annFixed)
	args[annReplica], args[annTTL], args[annTasks] = driver.Escape(b.cfg.Replica), ms(ttl), announceTasks(a)
	args[annProcess], args[annHost], args[annVersion] = a.Process, driver.Escape(a.Host), driver.Escape(a.Version)
	args[annLast] = strconv.FormatInt(b.announced.Load(), 10)
	r, err := scriptAnnounce().Run(ctx, b.c, []string{b.k.replicas()}, args...).Text()
	if err != nil {
		return err
	}
	f := strings.Split(r, "|")
	now, nowErr := number(f[len(f)-1])
	if nowErr == nil {
		b.announced.Store(now)
	}
	if len(f) >= 4 {
		same, _ := number(f[len(f)-3])
		live, _ := number(f[len(f)-2])
		b.share.Store(&pollShare{same: clampShare(same), live: clampShare(live)})
	}
	if f[0] == "dup" && len(f) == 6 {
		host, _ := driver.Unescape(f[1])
		n, _ := number(f[2])
		// Kept for the console's replicas page, while it goes on (the two
		// processes find each other every announcement or two).
		b.c.HSet(ctx, b.k.duplicates(), driver.Escape(b.cfg.Replica), f[1]+"|"+strconv.FormatInt(now+3*ttl.Milliseconds(), 10)) //nolint:errcheck // the warning is logged either way
		return &driver.DuplicateReplicaError{Replica: b.cfg.Replica, Host: host, Since: driver.MSTime(n)}
	}
	return nil
}

func (b *redisDriver) Replicas(ctx context.Context) ([]driver.Replica, error) {
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
	var rs []driver.Replica
	for id, v := range all {
		a, err := decodeAnnounce(v)
		if err != nil || a.Until < now {
			continue
		}
		name, _ := driver.Unescape(id)
		r := driver.Replica{ID: name, Host: a.Host, Version: a.Version, Tasks: a.Tasks, Since: driver.MSTime(a.Since), Seen: driver.MSTime(a.Seen), Process: a.Process}
		if host, until, ok := strings.Cut(dups[id], "|"); ok {
			if n, err := number(until); err == nil && n >= now {
				r.DuplicateOn, _ = driver.Unescape(host)
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func (b *redisDriver) Known(ctx context.Context, task string) (bool, error) {
	n, err := scriptKnown().Run(ctx, b.c, []string{b.k.replicas()}, driver.Escape(task)).Int()
	return n == 1, err
}
