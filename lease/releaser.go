package lease

import (
	"context"
	"sync"
)

// releaser batches the releases of runs that end at about the same time,
// as a database commits a group: a release made while none is in flight
// goes out at once, alone; releases made while one is in flight wait for
// it and then go out together, one script call per task. So an idle store
// adds no latency, and a busy one sends a few hundred releases per round
// trip instead of one each (README, "Speed"). Each Release still returns
// only once its own release is done, with its own answer.
type releaser struct {
	mu       sync.Mutex
	queue    []releaseReq
	flushing bool
}

type releaseReq struct {
	arg  releaseArg
	done chan releaseDone
}

type releaseDone struct {
	rep releaseReply
	err error
}

// releaseBatchMax bounds one flush: a batch's script calls, one per task,
// hold at most this many leases in all.
const releaseBatchMax = 4 * BatchSize

// releaseOne queues arg and waits for its answer, or for ctx.
func (s *Store) releaseOne(ctx context.Context, arg releaseArg) (releaseReply, error) {
	r := &s.rel
	done := doneChans.Get().(chan releaseDone)
	r.mu.Lock()
	r.queue = append(r.queue, releaseReq{arg, done})
	start := !r.flushing
	r.flushing = true
	r.mu.Unlock()
	if start {
		go s.flushReleases()
	}
	select {
	case d := <-done:
		doneChans.Put(done) // empty again, and no one else sends on it
		return d.rep, d.err
	case <-ctx.Done():
		return releaseReply{}, ctx.Err() // done is not reused: the answer may still come
	}
}

// doneChans are releaseOne's answer channels, reused: a fan-out releases
// 100,000 leases a tick.
var doneChans = sync.Pool{New: func() any { return make(chan releaseDone, 1) }}

// flushReleases sends what is queued, batch after batch, until the queue
// is empty. A batch is sent under its own timeout: a caller that stops
// waiting does not cancel the others' releases.
func (s *Store) flushReleases() {
	r := &s.rel
	for {
		r.mu.Lock()
		n := min(len(r.queue), releaseBatchMax)
		if n == 0 {
			r.flushing = false
			r.mu.Unlock()
			return
		}
		batch := r.queue[:n:n]
		r.queue = append([]releaseReq(nil), r.queue[n:]...)
		r.mu.Unlock()
		args := make([]releaseArg, n)
		for i, q := range batch {
			args[i] = q.arg
		}
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		reps, err := s.b.release(ctx, args)
		cancel()
		for i, q := range batch {
			d := releaseDone{err: err}
			if err == nil {
				d.rep = reps[i]
			}
			q.done <- d
		}
	}
}
