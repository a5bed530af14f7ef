package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// scriptKeys is a go-redis hook that records the keys of every script call.
type scriptKeys struct {
	mu    sync.Mutex
	calls [][]string
}

func (h *scriptKeys) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.record(c)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptKeys) record(cmd redis.Cmder) {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 3 {
		return
	}
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(args[3+i])
	}
	h.mu.Lock()
	h.calls = append(h.calls, keys)
	h.mu.Unlock()
}

// TestScriptsKeepToOneSlot: every script call's keys hash to one Cluster
// slot, for task names that try to break the hash tag ({, }, :, spaces,
// escapes), through every kind of call: acquire (with due entries and
// request ids), renew, release (with next, follow-up and answers),
// enqueue, take, ack, unlock, sweep, announce, known, the epochs, and the
// history's tick records; a task's failures and actions share its slot.
func TestScriptsKeepToOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t)
	hook := &scriptKeys{}
	// On every node's client: the store also sends pipelines to a master's
	// client itself (acknowledgement per shard).
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), NewClient: func(o *redis.Options) *redis.Client {
		n := redis.NewClient(o)
		n.AddHook(hook)
		return n
	}})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedis(c, "slots", Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(bg) })
	if err := s.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	tasks := []string{"{x}", "a}b{c", "}{", "x:{y}:z", "{}", "{{a}}", "t%7Bx", "sp ace", "plain"}
	s.WantShards("plain", 4) // a shard's keys share its own slot
	s.WantShards("}{", 3)
	for _, task := range tasks {
		everyScriptOf(t, s, cl, task)
	}
	if err := s.Fleet().Sweep(bg); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().Announce(bg, tasks, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fleet().Known(bg, tasks[0]); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	multi := 0
	for _, keys := range hook.calls {
		if len(keys) > 1 {
			multi++
		}
		for _, k := range keys[1:] {
			if a, b := cl.Slot(t, keys[0]), cl.Slot(t, k); a != b {
				t.Errorf("one script, two slots: %s (%d) and %s (%d)", keys[0], a, k, b)
			}
		}
	}
	expect.True(t, fmt.Sprintf("script calls with several keys seen: %d of %d", multi, len(hook.calls)), multi >= 5*len(tasks))
}

// twoTasksTwoMasters acquires leases a and b of two tasks on two masters of
// a new Cluster: dead's, on deadMaster, then alive's.
func twoTasksTwoMasters(t *testing.T, readTimeout time.Duration) (s *Store, deadMaster *redistest.Server, dead, alive string, ls []*Lease) {
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: 1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: readTimeout, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedis(c, "rel", Options{Replica: "r"}, driver.AcksNever)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(bg) })
	if err := s.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	deadMaster = cl.MasterOf(t, TaskKey("rel", "task-0"))
	for i := 1; alive == ""; i++ {
		task := "task-" + strconv.Itoa(i)
		if cl.MasterOf(t, TaskKey("rel", task)) != deadMaster {
			alive = task
		}
	}
	dead = "task-0"
	for _, task := range []string{dead, alive} {
		for _, r := range s.AcquireBatch(bg, []driver.Request{{Task: task, Entity: "a", TTL: time.Minute, Reason: driver.ReasonTrigger},
			{Task: task, Entity: "b", TTL: time.Minute, Reason: driver.ReasonTrigger}}) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			ls = append(ls, r.Lease)
		}
	}
	return s, deadMaster, dead, alive, ls
}

// TestReleaseOnClusterNotHeldUpByAFrozenMaster: while one task's master is
// frozen (SIGSTOP), the releases of a task on another master are answered:
// each task's releases go out on their own. Before, they waited in the
// frozen task's batch, or behind it, until its call timed out, and their
// entities stayed busy that long.
func TestReleaseOnClusterNotHeldUpByAFrozenMaster(t *testing.T) {
	_, frozen, dead, _, ls := twoTasksTwoMasters(t, time.Minute) // the frozen call ends at ReleaseTimeout
	frozen.Freeze()
	t.Cleanup(frozen.Thaw)
	fin := driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()}
	recs := make([]*thenRec, len(ls))
	for i, l := range ls { // the frozen master's first
		recs[i] = newThenRec(l)
		l.ReleaseThen(fin, nil, recs[i])
	}
	for i, l := range ls {
		if l.Task == dead {
			continue
		}
		if a := recs[i].answer(t); a.err != nil {
			t.Fatalf("release of %s/%s: %v", l.Task, l.Entity, a.err)
		}
	}
	for i, l := range ls {
		if l.Task != dead {
			continue
		}
		select {
		case a := <-recs[i].ch:
			t.Fatalf("the frozen master's release of %s/%s was answered (%v) before the live master's: they were held up by it", l.Task, l.Entity, a.err)
		default:
		}
	}
	frozen.Thaw()
	for i, l := range ls {
		if l.Task == dead {
			recs[i].answer(t) // failed or not: it comes
		}
	}
}

// TestReleaseOnClusterFailsOnlyTheDeadShard: releases batched together
// (the releaser groups runs that end together, one script call per task)
// succeed for the tasks whose master answers while another task's master
// is down; only that task's releases fail. Before, one dead master failed
// the whole batch, and the others' leases stayed held until their TTL.
func TestReleaseOnClusterFailsOnlyTheDeadShard(t *testing.T) {
	s, deadMaster, dead, alive, ls := twoTasksTwoMasters(t, time.Second)
	deadMaster.Stop()
	errs, err := s.ReleaseBatch(bg, ls, driver.Finished{Outcome: driver.OutcomeDone, Started: time.Now(), Ended: time.Now()})
	if err != nil {
		t.Fatalf("ReleaseBatch: %v", err)
	}
	for i, l := range ls {
		if got := errs[i] != nil; got != (l.Task == dead) {
			t.Errorf("release of %s/%s: %v (its master down: %v)", l.Task, l.Entity, errs[i], l.Task == dead)
		}
	}
	for _, e := range []string{"a", "b"} {
		st, err := s.Fleet().Entity(bg, alive, e)
		if err != nil {
			t.Fatal(err)
		}
		if st.Held != nil {
			t.Errorf("%s/%s still held after its release", alive, e)
		}
	}
}

// TestLossWatchOnClusterQuarantinesOnlyTheShard: a Cluster master that
// lost its data (FLUSHALL) is found by the loss watch, which reads one
// bucket per master; only that master's buckets are quarantined, from the
// loss, and the others' tasks go on being granted.
func TestLossWatchOnClusterQuarantinesOnlyTheShard(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedis(c, "loss", Options{Replica: "r", MaxTTL: time.Minute}, driver.AcksNever)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(bg) })
	if err := s.InitEpoch(bg); err != nil {
		t.Fatal(err)
	}
	lost := cl.MasterOf(t, TaskKey("loss", "task-0"))
	other := ""
	for i := 1; other == ""; i++ {
		if task := "task-" + strconv.Itoa(i); cl.MasterOf(t, TaskKey("loss", task)) != lost {
			other = task
		}
	}
	for _, task := range []string{"task-0", other} { // the store is prepared: the watch is on
		mustRelease(t, mustAcquire(t, s, driver.Request{Task: task, Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger}))
	}
	lostEpoch, otherEpoch := redisdriver.EpochKey("loss", "task-0"), redisdriver.EpochKey("loss", other)
	otherBefore := c.Get(bg, otherEpoch).Val()
	m := newClient(t, lost.Addr)
	if err := m.FlushAll(bg).Err(); err != nil {
		t.Fatal(err)
	}
	expect.WaitFor(t, 5*LossWatch, "the lost shard's epochs back", func() bool { return c.Exists(bg, lostEpoch).Val() == 1 })
	if _, err := s.Acquire(bg, driver.Request{Task: "task-0", Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger}); !errors.Is(err, ErrQuarantine) {
		t.Fatalf("a task of the shard that lost its data: %v, want the quarantine", err)
	}
	l, err := s.Acquire(bg, driver.Request{Task: other, Entity: "e", TTL: time.Minute, Reason: driver.ReasonTrigger})
	if err != nil {
		t.Fatalf("a task of another master: %v, want a grant", err)
	}
	mustRelease(t, l)
	if v := c.Get(bg, otherEpoch).Val(); v != otherBefore {
		t.Errorf("another master's epoch %q: it lost nothing", v)
	}
}

// everyScriptOf runs every script (and the history's writes) for task on
// the Cluster, and checks that the task's keys share one slot.
func everyScriptOf(t *testing.T, s *Store, cl *redistest.Cluster, task string) {
	t.Helper()
	req := func(e string) driver.Request {
		return driver.Request{Task: task, Entity: e, TTL: time.Minute, Reason: driver.ReasonTrigger, Queue: true}
	}
	rs := s.AcquireBatch(bg, []driver.Request{req("a{1}"), req("b}2{")})
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("%s: %v", task, r.Err)
		}
	}
	s.keeper.renewRound(bg, []*Lease{rs[0].Lease, rs[1].Lease})
	if err := s.Enqueue(bg, driver.Due{Task: task, Entity: "a{1}", Reason: driver.ReasonTrigger, Requests: []string{"req-1"}}, 0); err != nil {
		t.Fatal(err)
	}
	ds, err := s.TakeDue(bg, 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("%s: take %v, %v", task, ds, err)
	}
	from := ds[0]
	if _, err := s.Acquire(bg, driver.Request{Task: task, Entity: "a{1}", TTL: time.Minute, Reason: driver.ReasonTrigger, Queue: true, From: &from}); err == nil {
		t.Fatalf("%s: acquired a held lease", task)
	}
	if _, err := rs[0].Lease.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, &driver.Next{Reason: driver.ReasonReschedule, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, force := range []bool{false, true} { // revoke, then free
		if _, err := s.Unlock(bg, task, "b}2{", "op", force); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ack(bg, from); err != nil {
		t.Fatal(err)
	}
	// The history: a tick's part (a script), failures and actions.
	if err := s.Fleet().RecordTicks(bg, []driver.TickWrite{{Task: task, Tick: time.Now(), Part: driver.TickPart{Replica: "r", Written: time.Now()}, Keep: driver.DefaultHistory()}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().RecordFailures(bg, []driver.Failure{{Task: task, Entity: "a{1}"}}, func(string) driver.Retention { return driver.DefaultHistory() }); err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet().RecordAction(bg, driver.Action{Task: task, What: "pause"}, driver.DefaultHistory()); err != nil {
		t.Fatal(err)
	}
	entities := TaskKey("slots", task)
	for _, key := range redisdriver.HistoryKeys("slots", task) {
		if a, b := cl.Slot(t, entities), cl.Slot(t, key); a != b {
			t.Errorf("one task, two slots: %s (%d) and %s (%d)", entities, a, key, b)
		}
	}
}
