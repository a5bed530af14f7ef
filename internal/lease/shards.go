package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// A task's entities may be kept in several shards, so that a task of
// millions of entities is spread over a Redis Cluster's masters: shard s
// of task is what the driver knows as driver.ShardName(task, s), and an
// entity's shard is driver.ShardOf(entity, n). The store translates: its
// callers name the task, and a lease, a due entry or a status row carries
// the task's own name. Only a fan-out asks which shard an entity is in
// (ShardOf), to send each shard's entities in batches of their own: a
// batch of one shard is one script call.
//
// How many shards a task has is recorded in the driver the first time a
// store needs it (driver.Shards): what this process's config wants
// (WantShards) for a task new to the store, 1 for one that has state from
// before. Every replica then reads the same count, whatever its config
// says, so that an entity is looked for in one place. A reshard (tickd
// migrate) changes it while replicas run the task: each call that names a
// shard carries the count it was named by, and the driver refuses it
// (driver.ErrShardsChanged) when the task is kept in another number now.
// The store then reads the count again (refresh) and sends the call once
// more, each entity's shard named anew; a held lease is renewed and
// released where the reshard moved it (where). So no replica acts on an
// old count, however long it kept it.

// ErrShardName is returned for a task whose name holds driver.ShardMark:
// the store keeps a task's shards under such names.
var ErrShardName = errors.New("lease: a task name cannot hold " + driver.ShardMark)

// shardCounts are the shard counts a store knows.
type shardCounts struct {
	b      driver.Driver
	mu     sync.Mutex
	want   map[string]int // WantShards: for a task no count is recorded for
	counts map[string]int // as recorded, by task
	// gen counts the refreshes: a lease whose shard was named under the
	// current gen is renewed and released where it was granted.
	gen atomic.Uint64
}

// WantShards says how many shards task is to be kept in when the store
// records its count: before the store's first use of the task, or the
// count recorded stands (Shards). 1 unless said.
func (s *Store) WantShards(task string, n int) {
	c := &s.shards
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.want == nil {
		c.want = map[string]int{}
	}
	c.want[task] = min(max(n, 1), driver.MaxShards)
}

// Shards returns how many shards task is kept in, as recorded: it reads
// the count the first time, and records the wanted one (WantShards) if
// none is.
func (s *Store) Shards(ctx context.Context, task string) (int, error) {
	return s.shards.shards(ctx, task)
}

// shards is Store.Shards.
func (c *shardCounts) shards(ctx context.Context, task string) (int, error) {
	if strings.Contains(task, driver.ShardMark) {
		return 0, fmt.Errorf("%w: %q", ErrShardName, task)
	}
	c.mu.Lock()
	want := max(c.want[task], 1)
	c.mu.Unlock()
	return c.count(ctx, task, want)
}

// ReadShards reads tasks' shard counts as recorded, without recording
// any: a task with none is in one shard. The store reads them again,
// forgetting what it knew (a migration changes them).
func (f Fleet) ReadShards(ctx context.Context, tasks []string) (map[string]int, error) {
	s := f.s
	out := make(map[string]int, len(tasks))
	for _, t := range tasks {
		s.shards.mu.Lock()
		delete(s.shards.counts, t)
		s.shards.mu.Unlock()
		n, err := s.shards.recorded(ctx, t)
		if err != nil {
			return nil, err
		}
		out[t] = n
	}
	return out, nil
}

// RecordedShards reads tasks' shard counts as recorded, without recording
// any: a task none is recorded for yet (it never ticked, and no migrate
// resharded it) is absent, and its first tick records its config's count.
func (f Fleet) RecordedShards(ctx context.Context, tasks []string) (map[string]int, error) {
	s := f.s
	want := make(map[string]int, len(tasks))
	for _, t := range tasks {
		want[t] = 0
	}
	got, err := s.b.Shards(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("read the shard counts: %w", err)
	}
	return got, nil
}

// refresh reads the shard counts of tasks again after the driver refused a
// call named by an old one (driver.ErrShardsChanged). While a reshard
// moves a task (driver.ErrResharding), it waits for the move's end, up to
// reshardWait, then gives up with that error.
func (c *shardCounts) refresh(ctx context.Context, tasks ...string) error {
	deadline := time.Now().Add(reshardWait)
	for {
		err := c.refreshOnce(ctx, tasks)
		if !errors.Is(err, driver.ErrResharding) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// reshardWait bounds how long a call refused by a reshard waits for the move
// to end before it fails (a fan-out, a renewal round and a release each
// try again later).
const reshardWait = 2 * time.Second

// refreshOnce reads tasks' counts, recording each wanted one if none is.
func (c *shardCounts) refreshOnce(ctx context.Context, tasks []string) error {
	want := make(map[string]int, len(tasks))
	c.mu.Lock()
	for _, t := range tasks {
		want[t] = max(c.want[t], 1)
	}
	c.mu.Unlock()
	got, err := c.b.Shards(ctx, want)
	if err != nil {
		return fmt.Errorf("read the shard counts again: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	for _, t := range tasks {
		c.counts[t] = max(got[t], 1)
	}
	c.gen.Add(1) // every lease named before is named anew (where)
	return nil
}

// where is the driver's name of l's shard, and the count it is named by:
// as granted, unless a refresh changed a count since.
func (c *shardCounts) where(l *Lease) (string, int) {
	if l.gen == c.gen.Load() {
		return l.d.Task, l.d.Shards
	}
	c.mu.Lock()
	n, ok := c.counts[l.Task]
	c.mu.Unlock()
	if !ok {
		return l.d.Task, l.d.Shards
	}
	return driver.ShardName(l.Task, driver.ShardOf(l.Entity, n)), n
}

// located is d, l's lease as its driver sees it at a release (Lease.ref),
// as the driver is to see it now: d when its shard is named as it was
// granted, else a copy named anew (where).
func (c *shardCounts) located(l *Lease, d *driver.Lease) *driver.Lease {
	name, n := c.where(l)
	if name == d.Task && n == d.Shards {
		return d
	}
	cp := *d
	cp.Task, cp.Shards = name, n
	return &cp
}

// renewing is l as the driver is to see it for a renewal: &l.d when its
// shard is named as it was granted, else a copy named anew (where) of
// what a renewal reads, the fields no one writes after the grant (a
// release's Lease.ref writes the others).
func (c *shardCounts) renewing(l *Lease) *driver.Lease {
	name, n := c.where(l)
	if name == l.d.Task && n == l.d.Shards {
		return &l.d
	}
	return &driver.Lease{Task: name, Entity: l.d.Entity, Token: l.d.Token, TTL: l.d.TTL, Shards: n}
}

// changedTasks are the tasks whose calls the driver refused as named by an
// old count: those of the entries of errs that are driver.ErrShardsChanged.
func changedTasks(n int, errAt func(int) error, taskAt func(int) string) []string {
	var out []string
	for i := range n {
		if errors.Is(errAt(i), driver.ErrShardsChanged) && !slices.Contains(out, taskAt(i)) {
			out = append(out, taskAt(i))
		}
	}
	return out
}

// recorded is task's shard count as recorded, without recording one: 1
// while none is (nothing was written for the task in another shard).
func (c *shardCounts) recorded(ctx context.Context, task string) (int, error) {
	return c.count(ctx, task, 0)
}

// count is task's shard count as recorded, kept once read; with want > 0
// it records want if none is. 1 while none is.
func (c *shardCounts) count(ctx context.Context, task string, want int) (int, error) {
	c.mu.Lock()
	n, ok := c.counts[task]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	got, err := c.b.Shards(ctx, map[string]int{task: want})
	if err != nil {
		return 0, fmt.Errorf("read the shard count of %s: %w", task, err)
	}
	if n, ok = got[task]; !ok {
		return 1, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[task] = n
	return n, nil
}

// shardNames are the driver's names of task's shards, for a read: a
// read records no count.
func (c *shardCounts) shardNames(ctx context.Context, task string) ([]string, error) {
	if task == "" {
		return []string{""}, nil // every task: the driver's rows are translated back
	}
	n, err := c.recorded(ctx, task)
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = driver.ShardName(task, i)
	}
	return names, nil
}

// shardName is the driver's name of the shard entity of task is in, for
// a write (write true: the count is recorded if it is not) or a read, and
// the count it is named by.
func (c *shardCounts) shardName(ctx context.Context, task, entity string, write bool) (string, int, error) {
	count := c.recorded
	if write {
		count = c.shards
	}
	n, err := count(ctx, task)
	if err != nil {
		return "", 0, err
	}
	return driver.ShardName(task, driver.ShardOf(entity, n)), n, nil
}

// dueName is the driver's name of the shard d is in: the one it was taken
// from (not checked against the count: 0), or its entity's, with the count
// it is named by.
func (c *shardCounts) dueName(ctx context.Context, d driver.Due) (string, int, error) {
	if d.Claim != "" {
		return driver.ShardName(d.Task, d.Shard), 0, nil
	}
	return c.shardName(ctx, d.Task, d.Entity, true)
}

// taskOf is the task of a driver's name.
func taskOf(name string) string {
	t, _ := driver.SplitShard(name)
	return t
}

// sharded returns reqs as the driver is to see them: each request of a
// task of several shards copied, with its shard's name, and its due entry
// too. reqs itself when no task has more than one; ns[i] is the count the
// request's shard is named by, bad[i] the error of a request the store
// cannot name.
func (c *shardCounts) sharded(ctx context.Context, reqs []driver.Request) (out []driver.Request, ns []int, bad []error) {
	ns = make([]int, len(reqs))
	last, lastN := "", 1
	for i := range reqs {
		r := &reqs[i]
		if r.Task != last || i == 0 {
			n, err := c.shards(ctx, r.Task)
			if err != nil {
				if bad == nil {
					bad = make([]error, len(reqs))
				}
				bad[i] = err
				continue
			}
			last, lastN = r.Task, n
		}
		ns[i] = lastN
		if lastN == 1 {
			continue
		}
		if out == nil {
			out = slices.Clone(reqs)
		}
		name := driver.ShardName(r.Task, driver.ShardOf(r.Entity, lastN))
		out[i].Task = name
		if d := r.From; d != nil {
			from := *d
			if d.Claim != "" {
				name = driver.ShardName(d.Task, d.Shard)
			}
			from.Task = name
			out[i].From = &from
		}
	}
	if out == nil {
		out = reqs
	}
	return out, ns, bad
}

// eachShard calls fn with the driver's name of each of task's shards.
func (c *shardCounts) eachShard(ctx context.Context, task string, fn func(name string) error) error {
	names, err := c.shardNames(ctx, task)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}

// mergeAnswers reads the answers to request id from each of task's shards.
func (c *shardCounts) mergeAnswers(ctx context.Context, task, id string) (map[string]driver.Outcome, error) {
	out := map[string]driver.Outcome{}
	err := c.eachShard(ctx, task, func(name string) error {
		m, err := c.b.Answers(ctx, name, id)
		maps.Copy(out, m)
		return err
	})
	return out, err
}

// announcedShards are the names of the other shards of tasks: their due
// entries are this replica's to take too. Only the counts this store knows
// are used, with no round trip: a replica learns a task's at its first
// tick, and until then the due poll's read of every bucket (every 50th
// poll) finds the entries of the task's other shards.
func (c *shardCounts) announcedShards(tasks []string) []string {
	var out []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range tasks {
		n := c.counts[t]
		for i := 1; i < n; i++ {
			out = append(out, driver.ShardName(t, i))
		}
	}
	return out
}
