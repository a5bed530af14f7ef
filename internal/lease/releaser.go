package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// releasers are a store's releasers, one per task's shard
// (driver.ShardName), made as releases are asked for.
type releasers struct {
	b      driver.Driver
	shards *shardCounts
	keeper *keeper
	m      sync.Map // task's shard → *releaser
}

// releaser batches the releases of one task's runs that end at about the
// same time, as a database commits a group: a release made while none is
// in flight goes out at once, alone; releases made while one is in flight
// wait for it and then go out together, in one script call. So an idle
// store adds no latency, and a busy one sends a few hundred releases per
// round trip instead of one each (docs/performance.md). Each release still gets
// its own answer: Release returns it, ReleaseThen hands it on. Each task
// has its releaser: on a Cluster, a task whose master does not answer holds
// up only its own releases, not those of tasks on the other masters.
type releaser struct {
	mu       sync.Mutex
	queue    []releaseReq
	spare    []releaseReq // the last batch's array, for the next queue
	flushing bool
	args     []driver.ReleaseArg // the flush's, reused
	// flight is the batch sent, until it is answered; landed, made by a
	// waiter (ownRelease), is closed then.
	flight []releaseReq
	landed chan struct{}
}

// releaseReq is a queued release: its answer goes to done (Release) or to
// then (ReleaseThen).
type releaseReq struct {
	l    *Lease
	arg  driver.ReleaseArg // l's
	done chan releaseDone
	then AfterRelease
}

type releaseDone struct {
	rep driver.ReleaseReply
	err error
}

// AfterRelease is told how a release asked for with ReleaseThen went.
type AfterRelease interface {
	// AfterRelease gets what Release would have returned. It is called
	// on a goroutine of the store's, after the lease was dropped, with the
	// answers of the releases batched with this one: it must not block.
	AfterRelease(Released, error)
}

// releaseBatchMax bounds one flush: its script call holds at most this
// many leases.
const releaseBatchMax = 4 * driver.BatchSize

// releaseRenamed sends once more the releases (args, answered by reps, of
// the leases at(i)) that the driver refused as named by an old shard
// count (a reshard moved them), once the counts are read again; their
// answers replace the refusals.
func (rs *releasers) releaseRenamed(ctx context.Context, at func(int) *Lease, args []driver.ReleaseArg, reps []driver.ReleaseReply) {
	refused := func(i int) error { return reps[i].Err }
	changed := changedTasks(len(reps), refused, func(i int) string { return at(i).Task })
	if len(changed) == 0 || rs.shards.refresh(ctx, changed...) != nil {
		return
	}
	var idx []int
	var again []driver.ReleaseArg
	for i := range reps {
		if errors.Is(reps[i].Err, driver.ErrShardsChanged) {
			a := args[i]
			a.Lease = rs.shards.located(at(i), a.Lease)
			idx, again = append(idx, i), append(again, a)
		}
	}
	res, err := rs.b.Release(ctx, again)
	if err != nil {
		return
	}
	for k, i := range idx {
		reps[i] = res[k]
	}
}

// releaseOne queues arg and waits for its answer, or for ctx.
func (rs *releasers) releaseOne(ctx context.Context, l *Lease, arg driver.ReleaseArg) (driver.ReleaseReply, error) {
	done := doneChans.Get().(chan releaseDone)
	rs.queueRelease(releaseReq{l: l, arg: arg, done: done})
	select {
	case d := <-done:
		doneChans.Put(done) // empty again, and no one else sends on it
		return d.rep, d.err
	case <-ctx.Done():
		return driver.ReleaseReply{}, ctx.Err() // done is not reused: the answer may still come
	}
}

// doneChans are releaseOne's answer channels, reused: a fan-out releases
// 100,000 leases a tick.
var doneChans = sync.Pool{New: func() any { return make(chan releaseDone, 1) }}

// queueRelease queues q with its shard's releases, and starts a flush if
// none is going on.
func (rs *releasers) queueRelease(q releaseReq) {
	v, ok := rs.m.Load(q.l.d.Task) // per shard: one master's
	if !ok {
		v, _ = rs.m.LoadOrStore(q.l.d.Task, &releaser{})
	}
	r := v.(*releaser)
	r.mu.Lock()
	r.queue = append(r.queue, q)
	start := !r.flushing
	r.flushing = true
	r.mu.Unlock()
	if start {
		go rs.flushReleases(r)
	}
}

// flushReleases sends what is queued, batch after batch, until the queue
// is empty. A batch is sent under its own timeout: a caller that stops
// waiting does not cancel the others' releases. Its leases are dropped
// together, then answered.
//
// A flush that finds one release queued first yields once: runs ending
// at the same moment on other goroutines then join its batch, where they
// would have waited for a lone release's round trip and gone out in the
// next. A store with nothing else to run goes on at once. With a task in
// 16 shards, one replica sent a third of its release calls with one
// lease each; 6 replicas, the commands per run went from 1.17× one
// replica's to 0.95× (docs/performance.md, "Several replicas").
func (rs *releasers) flushReleases(r *releaser) {
	r.mu.Lock()
	alone := len(r.queue) < 2
	r.mu.Unlock()
	if alone {
		runtime.Gosched()
	}
	for {
		r.mu.Lock()
		n := min(len(r.queue), releaseBatchMax)
		if n == 0 {
			r.flushing = false
			r.mu.Unlock()
			return
		}
		// The queue's array becomes the batch's, and the last batch's the
		// queue's: a busy store allocates no queue.
		batch := r.queue[:n]
		r.queue = append(r.spare[:0], r.queue[n:]...)
		r.spare, r.flight = nil, batch
		r.mu.Unlock()
		args := r.args[:0]
		for _, q := range batch {
			a := q.arg
			a.Lease = rs.shards.located(q.l, a.Lease)
			args = append(args, a)
		}
		r.args = args
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		reps, err := rs.b.Release(ctx, args)
		if err == nil {
			rs.releaseRenamed(ctx, func(i int) *Lease { return batch[i].l }, args, reps)
		}
		cancel()
		// Released or not, the leases are renewed no more: a release that
		// failed leaves its lease in Redis until its TTL passes, never held
		// for good.
		rs.keeper.dropEach(len(batch), func(i int) *Lease { return batch[i].l }, ErrReleased)
		// Landed: no longer on its way (ownRelease), before the batch is
		// answered, and before it is cleared, which ownRelease must not see.
		r.mu.Lock()
		r.flight = nil
		if r.landed != nil {
			close(r.landed)
			r.landed = nil
		}
		r.mu.Unlock()
		var then *[]answer
		for i, q := range batch {
			d := releaseDone{err: err}
			if err == nil {
				d.rep = reps[i]
			}
			if q.then == nil {
				q.done <- d
				continue
			}
			if then == nil {
				then = answers.Get().(*[]answer)
			}
			*then = append(*then, answer{q.l, d, q.then})
		}
		if then != nil {
			go answerAll(then)
		}
		clear(batch)
		clear(args)
		r.mu.Lock()
		r.spare = batch[:0]
		r.mu.Unlock()
	}
}

// answer is a ReleaseThen's answer, to hand on.
type answer struct {
	l    *Lease
	d    releaseDone
	then AfterRelease
}

// answers are the lists of a batch's answers, reused.
var answers = sync.Pool{New: func() any { return new([]answer) }}

// answerAll hands a batch's answers on, off the flush: the next batch goes
// out meanwhile.
func answerAll(as *[]answer) {
	for _, a := range *as {
		a.then.AfterRelease(released(a.l, a.d.rep, a.d.err))
	}
	clear(*as)
	*as = (*as)[:0]
	answers.Put(as)
}

// released is what Release returns for l's release, given its reply or
// the error of its batch.
func released(l *Lease, rep driver.ReleaseReply, err error) (Released, error) {
	if err == nil {
		err = rep.Err
	}
	if err != nil {
		return Released{}, fmt.Errorf("release lease %s/%s: %w", l.Task, l.Entity, err)
	}
	return Released{FollowUp: rep.FollowUp, Superseded: rep.Superseded}, nil
}

// ownRelease answers a channel closed once the batch in flight of the
// releaser that holds a release of task's entity, queued or in flight, is
// answered; nil when this store has none on its way.
func (rs *releasers) ownRelease(task, entity string) <-chan struct{} {
	task = taskOf(task)
	var ch chan struct{}
	rs.m.Range(func(_, v any) bool {
		r := v.(*releaser)
		r.mu.Lock()
		defer r.mu.Unlock()
		if !releasing(r.queue, task, entity) && !releasing(r.flight, task, entity) {
			return true
		}
		if r.landed == nil {
			r.landed = make(chan struct{})
		}
		ch = r.landed
		return false
	})
	return ch
}

func releasing(qs []releaseReq, task, entity string) bool {
	for _, q := range qs {
		if q.l.Entity == entity && q.l.Task == task {
			return true
		}
	}
	return false
}

// ownReleases is every (task, entity) whose release is on its way from
// this store, queued or in flight: one pass over the releasers for a
// batch's refusals, not one for each (a tick overlapping the runs of the
// last may find thousands busy).
func (rs *releasers) ownReleases() map[[2]string]struct{} {
	set := map[[2]string]struct{}{}
	rs.m.Range(func(_, v any) bool {
		r := v.(*releaser)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, qs := range [][]releaseReq{r.queue, r.flight} {
			for _, q := range qs {
				set[[2]string{q.l.Task, q.l.Entity}] = struct{}{}
			}
		}
		return true
	})
	return set
}

// heldEntities is every (task, entity) this store holds a lease of, its
// release maybe on its way.
func (k *keeper) heldEntities() map[[2]string]struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	set := make(map[[2]string]struct{}, len(k.held))
	for l := range k.held {
		set[[2]string{l.Task, l.Entity}] = struct{}{}
	}
	return set
}

// AwaitOwnRelease waits until no release of task's entity is on its way
// from this store (a run that ended here, its release queued or in
// flight), for at most ReleaseTimeout or until ctx ends, and says whether
// there was one. A
// run's slot goes back as its handler returns, before its release lands
// (the scheduler's execute): an acquire sent meanwhile would find the
// entity busy with the run that ended.
func (s *Store) AwaitOwnRelease(ctx context.Context, task, entity string) bool {
	ch := s.rel.ownRelease(task, entity)
	if ch == nil {
		return false
	}
	t := time.NewTimer(ReleaseTimeout)
	defer t.Stop()
	for ch != nil {
		select {
		case <-ch:
		case <-t.C:
			return true
		case <-ctx.Done():
			return true
		}
		ch = s.rel.ownRelease(task, entity)
	}
	return true
}
