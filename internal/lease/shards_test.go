package lease

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

// TestShardsSpreadATaskOverTheMasters: a task in 16 shards keeps its
// entities on every master of a 3-master Cluster, none with more than half
// of them, and a store of another replica finds each one where the first
// put it.
func TestShardsSpreadATaskOverTheMasters(t *testing.T) {
	cl := redistest.StartCluster(t)
	newStore := func(want int) *Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { c.Close() })
		s, err := NewRedis(c, "spread", Options{Replica: "r"}, driver.AcksNever)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(bg) })
		s.WantShards("big", want)
		return s
	}
	a := newStore(16)
	if err := a.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	reqs := make([]driver.Request, n)
	for i := range reqs {
		reqs[i] = driver.Request{Task: "big", Entity: fmt.Sprintf("user-%d", i), TTL: time.Minute, Reason: driver.ReasonTick, Tick: time.Now().Truncate(time.Second)}
	}
	for _, r := range a.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		expect.Equal(t, "a lease's task", r.Lease.Task, "big")
	}
	total := 0
	for _, m := range cl.Masters(t) {
		c := newClient(t, m.Addr)
		held := 0
		for _, k := range c.Keys(bg, "spread:*:entities").Val() {
			expect.True(t, "a shard's key: "+k, strings.Contains(k, ":big"))
			held += int(c.HLen(bg, k).Val())
		}
		t.Logf("master %s: %d entities", m.Addr, held)
		expect.True(t, fmt.Sprintf("master %s holds %d of %d: some, and not half", m.Addr, held, n), held > 0 && held < n/2)
		total += held
	}
	expect.Equal(t, "entities kept", total, n)
	b := newStore(1) // another replica, whose config says otherwise: the recorded count stands
	got, err := b.Shards(bg, "big")
	expect.True(t, "the recorded count", err == nil && got == 16)
	for i := range reqs {
		reqs[i].Reason = driver.ReasonTrigger
	}
	for i, r := range b.AcquireBatch(bg, reqs) {
		if !errors.Is(r.Err, ErrBusy) {
			t.Fatalf("%s from another replica: %v, want busy", reqs[i].Entity, r.Err)
		}
	}
	held := 0
	if err := b.Fleet().Leases(bg, "big", func(h driver.Held) error {
		expect.Equal(t, "a held lease's task", h.Task, "big")
		held++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "leases listed", held, n)
}

// TestShardCountOfATaskFromBefore: a task with state in its one shard
// (written by a tickd before shards) stays in one, whatever a config
// wants, so that no entity is looked for where it is not. A new task's
// count is recorded by its first write, not by a read before it.
func TestShardCountOfATaskFromBefore(t *testing.T) {
	k := redisKit(t)
	a := k.client(Options{Replica: "A"})
	mustAcquire(t, a, driver.Request{Task: "old", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger})
	c := redis.NewClient(&redis.Options{Addr: redisClient(a).(*redis.Client).Options().Addr})
	t.Cleanup(func() { c.Close() })
	var shardsKey string
	for _, key := range c.Keys(bg, "*:shards").Val() {
		shardsKey = key
	}
	if shardsKey == "" {
		t.Fatal("no shard count recorded")
	}
	c.Del(bg, shardsKey) // as a tickd before shards left it
	b := k.client(Options{Replica: "B"})
	b.WantShards("old", 8)
	n, err := b.Shards(bg, "old")
	expect.True(t, fmt.Sprintf("shards %d, %v: want 1", n, err), err == nil && n == 1)
	if _, err := b.Acquire(bg, driver.Request{Task: "old", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrBusy) {
		t.Fatalf("the entity held from before: %v, want busy", err)
	}
	b.WantShards("new", 8)
	n, err = b.Shards(bg, "new")
	expect.True(t, fmt.Sprintf("a new task: shards %d, %v: want 8", n, err), err == nil && n == 8)
	// A read records nothing: the first write records its store's count.
	c2 := k.client(Options{Replica: "C"})
	if _, err := c2.Fleet().EntityPage(bg, "fresh", driver.PageQuery{Size: 10}); err != nil {
		t.Fatal(err)
	}
	b.WantShards("fresh", 8)
	mustAcquire(t, b, driver.Request{Task: "fresh", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger})
	n, err = c2.Shards(bg, "fresh")
	expect.True(t, fmt.Sprintf("read first, written later: shards %d, %v: want 8", n, err), err == nil && n == 8)
	if _, err := b.Acquire(bg, driver.Request{Task: "a" + "~1", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrShardName) {
		t.Fatalf("a task named like a shard: %v, want ErrShardName", err)
	}
}

// TestReshardKeepsEveryEntitysState: a task of one shard resharded into 4,
// then back into 2: each entity's once-per-tick record, fence, lease and
// pending request are where the new count looks for them.
func TestReshardKeepsEveryEntitysState(t *testing.T) {
	k := redisKit(t)
	a := k.client(Options{Replica: "A"})
	T := time.Now().Truncate(time.Second)
	const n = 40
	fences := map[string]int64{}
	for i := range n {
		e := fmt.Sprint("e", i)
		l := mustAcquire(t, a, driver.Request{Task: "r", Entity: e, TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
		fences[e] = l.Fence
		mustRelease(t, l)
	}
	// A lease of a replica gone (it runs the task no more): it is held
	// where it moves, until it expires.
	mustAcquire(t, a, driver.Request{Task: "r", Entity: "held", TTL: time.Minute, Reason: driver.ReasonTrigger}).stopRenewing()
	if err := a.Enqueue(bg, driver.Due{Task: "r", Entity: "e7", Reason: driver.ReasonTrigger}, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, to := range []int{4, 2} {
		r, err := a.Fleet().Reshard(bg, "r", to)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("resharded: %+v", r)
		expect.True(t, fmt.Sprintf("entities moved: %d of %d", r.Entities, n+1), r.Entities > 0 && r.Entities < n+1)
		b := k.client(Options{Replica: "B"})
		got, err := b.Shards(bg, "r")
		expect.True(t, fmt.Sprintf("the count read: %d, %v", got, err), err == nil && got == to)
		for e, fence := range fences {
			_, err := b.Acquire(bg, driver.Request{Task: "r", Entity: e, TTL: time.Minute, Reason: driver.ReasonTick, Tick: T})
			if !errors.Is(err, ErrAlreadyRan) {
				t.Fatalf("%d shards: %s's tick: %v, want already ran", to, e, err)
			}
			l := mustAcquire(t, b, driver.Request{Task: "r", Entity: e, TTL: time.Minute, Reason: driver.ReasonTrigger})
			expect.True(t, fmt.Sprintf("%s's fence %d after %d", e, l.Fence, fence), l.Fence > fence)
			fences[e] = l.Fence
			mustRelease(t, l)
		}
		if _, err := b.Acquire(bg, driver.Request{Task: "r", Entity: "held", TTL: time.Minute, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrBusy) {
			t.Fatalf("%d shards: the held lease: %v, want busy", to, err)
		}
		pending := 0
		if err := b.Fleet().DueEntries(bg, "r", func(d driver.Due) error {
			expect.Equal(t, "the pending request's entity", d.Entity, "e7")
			pending++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		expect.Equal(t, "pending requests", pending, 1)
	}
}

// TestReleaseOfAShardNotHeldUpByAFrozenMaster: the releases of a task in
// shards go out shard by shard, so that while one shard's master is frozen
// (SIGSTOP), another shard's releases are answered, as another task's are
// (TestReleaseOnClusterNotHeldUpByAFrozenMaster).
func TestReleaseOfAShardNotHeldUpByAFrozenMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: 1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Minute, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedis(c, "relshard", Options{Replica: "r"}, driver.AcksNever)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(bg) })
	if err := s.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	s.WantShards("big", 16)
	masterOf := func(e string) *redistest.Server {
		return cl.MasterOf(t, TaskKey("relshard", driver.ShardName("big", driver.ShardOf(e, 16))))
	}
	frozen := masterOf("e0")
	other := ""
	for i := 1; other == ""; i++ {
		if e := fmt.Sprint("e", i); masterOf(e) != frozen {
			other = e
		}
	}
	var ls []*Lease
	for _, e := range []string{"e0", other} { // the frozen master's first
		ls = append(ls, mustAcquire(t, s, driver.Request{Task: "big", Entity: e, TTL: time.Minute, Reason: driver.ReasonTrigger}))
	}
	frozen.Freeze()
	t.Cleanup(frozen.Thaw)
	fin := driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}
	recs := make([]*thenRec, len(ls))
	for i, l := range ls {
		recs[i] = newThenRec(l)
		l.ReleaseThen(fin, nil, recs[i])
	}
	if a := recs[1].answer(t); a.err != nil {
		t.Fatalf("release of big/%s: %v", other, a.err)
	}
	select {
	case a := <-recs[0].ch:
		t.Fatalf("the frozen master's release was answered (%v) before the live one's: held up by it", a.err)
	default:
	}
	frozen.Thaw()
	recs[0].answer(t)
}

// TestStaleShardCountIsRefused: a replica (A) keeps the count it read, 16,
// while an operator reshards the task to 8 under it, with a lease of A's
// held and renewed. A's later grants, its renewals and its release are each
// refused by Redis as named by the old count, and done again where the
// reshard put the entity: a replica (B) that reads the new count never gets
// a lease A holds, every entity is granted once between the two, and the
// lease A held keeps being renewed (still trusted, still busy for B) until
// A releases it. Without the check in the scripts, A granted in its old
// shards what B granted in the new ones.
func TestStaleShardCountIsRefused(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis", true: "cluster"}[cluster], func(t *testing.T) {
			k := redisKit(t)
			if cluster {
				cl := redistest.StartCluster(t)
				k = redisKitWith(t, func() RedisClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) })
			}
			ttl := 3 * time.Second
			a := k.clientAcks(driver.AcksNever, Options{Replica: "A"})
			a.WantShards("s", 16)
			held := mustAcquire(t, a, driver.Request{Task: "s", Entity: "held", TTL: ttl, Reason: driver.ReasonTrigger})
			op := k.clientAcks(driver.AcksNever, Options{Replica: "op"})
			r, err := op.Fleet().Reshard(bg, "s", 8)
			if err != nil {
				t.Fatal(err)
			}
			expect.True(t, fmt.Sprintf("resharded %+v", r), r.From == 16 && r.To == 8)
			b := k.clientAcks(driver.AcksNever, Options{Replica: "B"})
			b.WantShards("s", 16) // its config says 16 too: the recorded 8 stands
			const n = 200
			var reqs []driver.Request
			for i := range n {
				reqs = append(reqs, driver.Request{Task: "s", Entity: fmt.Sprint("e", i), TTL: ttl, Reason: driver.ReasonTrigger})
			}
			granted := map[string]string{}
			for _, s := range []*Store{a, b} {
				for i, res := range s.AcquireBatch(bg, reqs) {
					switch {
					case res.Err == nil:
						if by, twice := granted[reqs[i].Entity]; twice {
							t.Fatalf("%s granted to %s and to %s", reqs[i].Entity, by, s.opts.Replica)
						}
						granted[reqs[i].Entity] = s.opts.Replica
					case !errors.Is(res.Err, ErrBusy):
						t.Fatalf("%s: %v, want granted or busy", reqs[i].Entity, res.Err)
					}
				}
			}
			expect.Equal(t, "entities granted once", len(granted), n)
			for _, e := range []string{"e1", "e2"} { // by count: A asks first, so A holds every one
				expect.Equal(t, e+" is held by", granted[e], "A")
			}
			got, err := b.Shards(bg, "s")
			expect.True(t, fmt.Sprintf("B reads %d, %v", got, err), err == nil && got == 8)
			// The lease held across the reshard: renewed where it moved.
			deadline := time.Now().Add(2 * ttl)
			for time.Now().Before(deadline) {
				if _, err := b.Acquire(bg, driver.Request{Task: "s", Entity: "held", TTL: ttl, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrBusy) {
					t.Fatalf("the lease A holds, after %v: %v, want busy", time.Since(deadline.Add(-2*ttl)), err)
				}
				if err := held.Check(); err != nil {
					t.Fatalf("A's lease across the reshard: %v, want still trusted", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			mustRelease(t, held)
			l := mustAcquire(t, b, driver.Request{Task: "s", Entity: "held", TTL: ttl, Reason: driver.ReasonTrigger})
			expect.True(t, fmt.Sprintf("fence after the move %d > %d", l.Fence, held.Fence), l.Fence > held.Fence)
		})
	}
}

// TestBatchAcrossMastersKeepsEveryGrant: a batch of a task in 16 shards
// is one script call per shard, on every master of a Cluster. When one
// master fails its calls (here the masters lack the scripts, as after a
// restart or a failover, but for one), the grants of the others are answered
// as grants, and its own are asked again: no lease is granted and then
// lost with the batch (every entity free again once each is released).
// Before, the whole batch was sent again, and each grant of the first
// sending stayed held, by no one, until its TTL.
func TestBatchAcrossMastersKeepsEveryGrant(t *testing.T) {
	cl := redistest.StartCluster(t)
	k := redisKitWith(t, func() RedisClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) })
	s := k.clientAcks(driver.AcksNever, Options{Replica: "A"})
	s.WantShards("b", 16)
	var reqs []driver.Request
	for i := range 100 {
		reqs = append(reqs, driver.Request{Task: "b", Entity: fmt.Sprint("e", i), TTL: time.Minute, Reason: driver.ReasonTrigger})
	}
	for _, m := range cl.Masters(t) { // no master has the scripts…
		mc := redis.NewClient(&redis.Options{Addr: m.Addr})
		err := mc.ScriptFlush(bg).Err()
		mc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustRelease(t, mustAcquire(t, s, reqs[0])) // …but the one e0's shard is on
	for _, r := range s.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			t.Fatalf("with a master without the scripts: %v, want granted", r.Err)
		}
		mustRelease(t, r.Lease)
	}
}

// TestPauseOverIsGoneBeforeADataLoss: a pause given an end (-for) is
// removed once the end passed, as a replica reads the pauses; so a data
// loss of the master holding the pauses' infos (a Cluster keeps the set
// and the infos in two slots) cannot leave the task in the set without its
// info, which reads as a pause with no end. Before, the task stayed
// paused for good after the loss (the nemesis on a Cluster: seed 6).
func TestPauseOverIsGoneBeforeADataLoss(t *testing.T) {
	srv := redistest.Start(t)
	k := redisKitOn(t, srv.Addr)
	s := k.client(Options{Replica: "A"})
	if err := s.Fleet().Pause(bg, "p", driver.PauseInfo{By: "ops", At: time.Now(), Until: time.Now().Add(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 5*time.Second, "the pause over", func() bool {
		ps, err := s.Fleet().Pauses(bg)
		return err == nil && len(ps) == 0
	})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	for _, key := range []string{":pauses", ":paused"} { // as the infos' master lost them
		ks, _ := c.Keys(bg, "*"+key).Result()
		if key == ":pauses" {
			for _, k := range ks {
				c.Del(bg, k)
			}
			continue
		}
		for _, k := range ks {
			if n, _ := c.SCard(bg, k).Result(); n != 0 {
				t.Fatalf("the pause over is still in %s", k)
			}
		}
	}
	ps, err := s.Fleet().Pauses(bg)
	expect.True(t, fmt.Sprintf("after the infos' loss: paused %v, %v", ps, err), err == nil && len(ps) == 0)
}

// TestPauseEndsWithTheLossOfItsInfo: a pause whose info is lost while it
// goes on (a Cluster keeps the set of paused tasks and their infos in two
// slots, and the infos' master restarted empty) is over, as where one
// Redis loses both; a pause made after it holds. Before, the task stayed
// in the set without an info, which read as a pause with no end: paused
// for good (the nemesis on a Cluster, seed 1795783510334112482).
func TestPauseEndsWithTheLossOfItsInfo(t *testing.T) {
	srv := redistest.Start(t)
	k := redisKitOn(t, srv.Addr)
	s := k.client(Options{Replica: "A"})
	pause := func() {
		t.Helper()
		if err := s.Fleet().Pause(bg, "p", driver.PauseInfo{By: "ops", At: time.Now(), Until: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	paused := func() bool {
		t.Helper()
		ps, err := s.Fleet().Pauses(bg)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := ps["p"]
		return ok
	}
	pause()
	expect.True(t, "paused", paused())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ks, _ := c.Keys(bg, "*:pauses").Result()
	expect.True(t, fmt.Sprintf("the infos' key (%v)", ks), len(ks) == 1)
	c.Del(bg, ks[0]) // as the infos' master lost them
	expect.True(t, "paused after the infos' loss", !paused())
	pause()
	expect.True(t, "paused again", paused())
	if err := s.Fleet().Resume(bg, "p"); err != nil {
		t.Fatal(err)
	}
	expect.True(t, "paused after the resume", !paused())
}

// TestShardCountOutlivesTheLossOfItsKey: a task resharded to 2 while its
// configs want 4, whose shard 0 (the count's own slot) is lost with its
// master's data while the other shards keep the count (a Cluster master
// restarted empty), is read as kept in 2, from its shards' layout keys:
// every grant goes through. Before, the lost count was recorded anew from
// the config (4), which shard 1's key (2) refused, again after every
// re-read: that part of the task never ran again (the nemesis on a
// Cluster, seed 1795752532398751008).
func TestShardCountOutlivesTheLossOfItsKey(t *testing.T) {
	srv := redistest.Start(t)
	k := redisKitOn(t, srv.Addr)
	opts := func(r string) Options {
		return Options{Replica: r, MaxTTL: 300 * time.Millisecond}
	}
	a := k.client(opts("A"))
	a.WantShards("s", 4)
	reqs := ranThenResharded(t, a, 300*time.Millisecond, 2)
	c := newClient(t, srv.Addr)
	main := countKeyOfS(t, c)
	bucket, _, _ := strings.Cut(main, "}")
	for _, key := range c.Keys(bg, bucket+"}*").Val() { // the slot's master lost its data
		c.Del(bg, key)
	}
	b := k.client(opts("B"))
	b.WantShards("s", 4) // its config says 4: the recorded 2 stands
	// The lost slot's entities are quarantined for MaxTTL, then granted.
	expect.WaitFor(t, 5*time.Second, "every entity granted after the loss", func() bool {
		all := true
		for i, r := range b.AcquireBatch(bg, reqs) {
			switch {
			case r.Err == nil:
				mustRelease(t, r.Lease)
			case errors.Is(r.Err, ErrQuarantine):
				all = false
			default:
				t.Fatalf("%s after the loss: %v, want granted (or quarantined a while)", reqs[i].Entity, r.Err)
			}
		}
		return all
	})
	got, err := b.Shards(bg, "s")
	expect.True(t, fmt.Sprintf("B reads %d shards, %v; want 2", got, err), err == nil && got == 2)
}

// TestShardLayoutOutlivesARollback: a task resharded from 2 shards to 4,
// after which the layout keys of its shards 0 and 3 go back to what they
// held before (one Cluster master restarted from a snapshot older than the
// migrate; the other masters keep the new layout): a store that had read 4
// and a new one both read 4, and every entity is granted. Before, shard 0
// said 2, the shards that kept 4 refused every call named by 2, and the
// re-read said 2 again: those entities never ran (the nemesis on a
// Cluster, seed 1795915241434977779). And a batch one of whose shards
// refuses keeps the grants the others made: before, with acknowledgement
// on, it failed whole, and those entities, asked for again, were found
// busy, held by no run until their TTL.
func TestShardLayoutOutlivesARollback(t *testing.T) {
	srv := redistest.Start(t)
	k := redisKitOn(t, srv.Addr)
	a := k.client(Options{Replica: "A"})
	reqs := ranThenResharded(t, a, time.Minute, 2)
	c := newClient(t, srv.Addr)
	main := countKeyOfS(t, c)
	prefix, _, _ := strings.Cut(main, ":{")
	keyOf := func(s int) string {
		return strings.TrimSuffix(TaskKey(prefix, driver.ShardName("s", s)), ":entities") + ":shards"
	}
	before := map[string]string{}
	for _, s := range []int{0, 3} {
		before[keyOf(s)] = c.Get(bg, keyOf(s)).Val()
	}
	if _, err := a.Fleet().Reshard(bg, "s", 4); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Shards(bg, "s"); err != nil || n != 4 {
		t.Fatalf("A reads %d shards, %v; want 4", n, err)
	}
	for key, v := range before { // the rolled-back master's keys
		c.Set(bg, key, v, 0)
	}
	b := k.client(Options{Replica: "B"})
	b.WantShards("s", 8)
	for _, s := range []*Store{a, b} {
		for i, r := range s.AcquireBatch(bg, reqs) {
			if r.Err != nil {
				t.Fatalf("%s after the rollback (%s): %v, want granted", reqs[i].Entity, s.Replica(), r.Err)
			}
			mustRelease(t, r.Lease)
		}
	}
	got, err := b.Shards(bg, "s")
	expect.True(t, fmt.Sprintf("B reads %d shards, %v; want 4", got, err), err == nil && got == 4)
}

// TestBatchWithAMasterDownKeepsTheOthersGrants: with acknowledgement on
// (a WAIT per master), a batch of a task in 16 shards while one master is
// down (killed, its replica not promoted yet) is granted on the masters
// that answer, and only the dead master's entities fail. Before, the dead
// master's error failed the whole batch and the others' grants were
// dropped, held by no run until their TTL: a sharded task ran none of its
// entities during a failover (TestRedisClusterMasterKilled, under load).
func TestBatchWithAMasterDownKeepsTheOthersGrants(t *testing.T) {
	cl := redistest.StartCluster(t)
	k := redisKitWith(t, func() RedisClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) })
	s := k.clientAcks(1, Options{Replica: "A"}) // each master's one replica
	s.WantShards("b", 16)
	var reqs []driver.Request
	for i := range 100 {
		reqs = append(reqs, driver.Request{Task: "b", Entity: fmt.Sprint("e", i), TTL: time.Minute, Reason: driver.ReasonTrigger})
	}
	mustRelease(t, mustAcquire(t, s, reqs[0])) // the count recorded, on whichever master
	dead := cl.Masters(t)[0]
	dead.Stop()
	granted, failed := 0, 0
	for _, r := range s.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			failed++
			continue
		}
		granted++
		mustRelease(t, r.Lease)
	}
	expect.True(t, fmt.Sprintf("with a master down: %d granted, %d failed; want some of each", granted, failed), granted > 0 && failed > 0)
}

// ranThenResharded grants and releases 40 entities of task s in a (its
// count recorded), then reshards s to n; it returns their requests.
func ranThenResharded(t *testing.T, a *Store, ttl time.Duration, n int) []driver.Request {
	t.Helper()
	var reqs []driver.Request
	for i := range 40 {
		reqs = append(reqs, driver.Request{Task: "s", Entity: fmt.Sprint("e", i), TTL: ttl, Reason: driver.ReasonTrigger})
	}
	for _, r := range a.AcquireBatch(bg, reqs) {
		mustRelease(t, r.Lease)
	}
	if _, err := a.Fleet().Reshard(bg, "s", n); err != nil {
		t.Fatal(err)
	}
	return reqs
}

// countKeyOfS is the layout key of task s's shard 0, the one its count is
// read from.
func countKeyOfS(t *testing.T, c *redis.Client) string {
	t.Helper()
	main := c.Keys(bg, "*:s:shards").Val()
	if len(main) != 1 {
		t.Fatalf("the count's key: %v", main)
	}
	return main[0]
}

// TestAReshardLeavesOlderTicksUnknown: a reshard numbers the entities it
// moves anew, in another shard's run record, so which of them ran a tick
// before it is not known: a catch-up or backfill of such a tick is
// refused as run (never twice), and the run record says Forgotten; a tick
// after it is run. Without the refusal, the entities moved to shards 1-3
// ran their tick a second time.
func TestAReshardLeavesOlderTicksUnknown(t *testing.T) {
	t.Parallel()
	a := redisKitOn(t, redistest.Start(t).Addr).client(Options{Replica: "A"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	var reqs []driver.Request
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprint("e", i))
		reqs = append(reqs, driver.Request{Task: "s", Entity: ids[i], TTL: time.Minute, Reason: driver.ReasonTick, Tick: T, Record: time.Hour})
	}
	for _, r := range a.AcquireBatch(bg, reqs) {
		mustRelease(t, r.Lease)
	}
	if _, err := a.Fleet().Reshard(bg, "s", 4); err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		reqs[i].Reason = driver.ReasonBackfill
	}
	for i, r := range a.AcquireBatch(bg, reqs) {
		if !errors.Is(r.Err, ErrAlreadyRan) {
			mustRelease(t, r.Lease)
			t.Errorf("%s: a backfill of a tick before the reshard: %v, want already ran", reqs[i].Entity, r.Err)
		}
	}
	after := time.Now().Truncate(time.Millisecond) // after the reshard began, by Redis's clock too
	rec, err := a.Fleet().RunRecords().Read(bg, "s", []time.Time{T, after}, ids)
	if err != nil {
		t.Fatal(err)
	}
	expect.True(t, "the tick before the reshard is not known", rec[0].Forgotten && !rec[1].Forgotten)
	for i := range reqs {
		reqs[i].Tick = after
	}
	for i, r := range a.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			t.Fatalf("%s: a backfill of a tick after the reshard: %v", reqs[i].Entity, r.Err)
		}
		mustRelease(t, r.Lease)
	}
}

// TestADataLossLeavesOlderTicksUnknown: Redis lost its data (its epochs
// gone) after a tick ran: which entities ran it is not known, and the run
// record says Forgotten before a grant found the loss and after.
func TestADataLossLeavesOlderTicksUnknown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := redisKitOn(t, srv.Addr).client(Options{Replica: "A"})
	T := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	mustRelease(t, mustAcquire(t, a, driver.Request{Task: "s", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTick, Tick: T, Record: time.Hour}))
	c := newClient(t, srv.Addr)
	if err := c.FlushAll(bg).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := a.Fleet().RunRecords().Read(bg, "s", []time.Time{T}, []string{"e"})
	expect.True(t, fmt.Sprintf("the tick is forgotten before a grant finds the loss: %+v %v", rec, err), err == nil && rec[0].Forgotten)
	if _, err := a.Acquire(bg, driver.Request{Task: "s", Entity: "f", TTL: time.Minute, Reason: driver.ReasonBackfill, Tick: T, Record: time.Hour}); !errors.Is(err, ErrAlreadyRan) && !errors.Is(err, ErrQuarantine) {
		t.Fatalf("a backfill of a tick before the loss: %v, want already ran or quarantined", err)
	}
	rec, err = a.Fleet().RunRecords().Read(bg, "s", []time.Time{T}, []string{"e"})
	expect.True(t, fmt.Sprintf("and after: %+v %v", rec, err), err == nil && rec[0].Forgotten)
}
