package scheduler

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tickd/tickd/lease"
)

// TickCounts says what one tick of a task did with its entities.
type TickCounts struct {
	Entities   int // read from the source
	Started    int // runs started on this replica
	Busy       int // skipped: the lease was held
	AlreadyRan int // skipped: another replica ran this tick
	// Quarantined: no lease while Redis holds no tickd state (a first
	// start, or a data loss) until the tick became too late to start.
	Quarantined int
	// Unacknowledged: granted, but the Redis replicas did not acknowledge
	// the grant (replica_acks), so nothing started; each was handed over
	// as a due run for when they do.
	Unacknowledged int
	Errors         int // no lease: the store failed, and the tick became too late
	// SourceFailed: the entity source failed (the entities read before the
	// failure were run).
	SourceFailed bool
	// Stopped: shutdown or a reload stopped the fan-out before it had read
	// and run its whole source; Entities counts those read until then.
	Stopped bool
}

// fanOut is one tick T of one task being fanned out: entities are read from
// the source, gathered into batches only as large as the free run slots (so
// a busy replica leaves entities to idle ones), and each batch's leases are
// tried in one round trip.
type fanOut struct {
	s     *Scheduler
	ts    *taskState
	T     time.Time
	ctx   context.Context
	batch []string
	reqs  []lease.Request // flush's, reused: the store keeps none of them
	n     TickCounts
	// In a fan-out in source order (no spread), the stream is cut into
	// chunks of chunkSize entities: a batch that holds a whole chunk sends
	// it as a chunk (lease.Request.Chunk), which only one replica takes.
	chunked bool
	pos     int // the stream position of the next entity read
	first   int // the stream position of batch[0]
	// A batch whose chunks another replica took, all of them, says that
	// replica reads this part of the stream now: rather than follow it and
	// lose each chunk to it, this fan-out skips ahead, and comes back to
	// what it skipped once the stream ends (revisit).
	ahead skipAhead
}

// skipAhead is a fan-out's skipping ahead of another replica.
type skipAhead struct {
	jump      int       // the chunk ends still to pass before taking entities again
	skipped   []skipped // what was passed, for revisit
	lastRound bool      // revisit's last: no more skipping
}

// reservation is what reserve got.
type reservation int

const (
	gotSlot  reservation = iota // a run slot is the entity's
	skipping                    // no slot: the fan-out skips ahead (ahead.jump > 0)
	stopped                     // no slot: the fan-out stops (shutdown, reload)
)

// skipped is a part of the stream a fan-out skipped.
type skipped struct {
	pos int // the stream position of ids[0]
	ids []string
}

// jumpChunks is how far a fan-out skips ahead when another replica took a
// whole batch: the replicas of a tick read the same stream from its start,
// so without it the ones that lost the race for a batch lose it for the
// next, and the next (docs/performance.md).
const jumpChunks = 8 * lease.BatchSize / chunkSize

// chunkSize is the length of a chunk of a tick's entity stream. Batches are
// as large as the free run slots, so a chunk must be small enough to fall
// whole inside most of them; each costs one SADD in the acquire script.
const chunkSize = 16

// fanOut runs tick T of ts.
func (s *Scheduler) fanOut(ctx context.Context, ts *taskState, T time.Time) {
	f := &fanOut{s: s, ts: ts, T: T, ctx: ctx}
	var err error
	if ts.t.Spread > 0 {
		err = f.spreadOut()
	} else {
		f.chunked = true
		err = ts.source.Each(ctx, f.add)
		f.flush()
		if rerr := f.revisit(); err == nil {
			err = rerr
		}
	}
	f.flush()
	t := ts.t
	if ctx.Err() != nil {
		err = nil // stopped by shutdown or reload: not the source's failure
		f.n.Stopped = true
	}
	if err != nil {
		s.log.Error("entity source failed", KeyTask, t.Name, tickAttr(T), KeyError, err)
		f.n.SourceFailed = true
	}
	n := f.n
	s.metrics.ticked(t.Name, T, n, err)
	lvl := slog.LevelInfo
	if n.Errors > 0 || n.SourceFailed || n.Quarantined > 0 {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "tick", KeyTask, t.Name, tickAttr(T),
		"entities", n.Entities, "started", n.Started, "busy", n.Busy, "already_ran", n.AlreadyRan,
		"quarantined", n.Quarantined, "unacknowledged", n.Unacknowledged, "errors", n.Errors, "source_failed", n.SourceFailed,
		"stopped", n.Stopped)
	s.observe(Event{Kind: EventTick, Task: t.Name, Tick: T, Counts: n})
}

// add takes the source's next entity.
func (f *fanOut) add(id string) error {
	f.n.Entities++
	f.pos++
	return f.addAt(id, f.pos-1)
}

// addAt takes the entity at stream position pos into the batch once a run
// slot is free for it.
func (f *fanOut) addAt(id string, pos int) error {
	switch f.reserve() {
	case skipping:
		f.skip(id, pos)
		return nil
	case stopped:
		return context.Cause(f.ctx)
	}
	if len(f.batch) > 0 && pos != f.first+len(f.batch) {
		f.flush() // a batch is one run of the stream (markChunks)
		if f.ahead.jump > 0 {
			f.skipReserved(id, pos)
			return nil
		}
	}
	if len(f.batch) == 0 {
		f.first = pos
	}
	f.batch = append(f.batch, id)
	if len(f.batch) >= lease.BatchSize && !f.flushWhole() {
		f.flush()
	}
	return nil
}

// skip sets the entity at pos aside, for revisit.
func (f *fanOut) skip(id string, pos int) {
	if n := len(f.ahead.skipped); n == 0 || f.ahead.skipped[n-1].pos+len(f.ahead.skipped[n-1].ids) != pos {
		f.ahead.skipped = append(f.ahead.skipped, skipped{pos: pos})
	}
	sk := &f.ahead.skipped[len(f.ahead.skipped)-1]
	sk.ids = append(sk.ids, id)
	if (pos+1)%chunkSize == 0 {
		f.ahead.jump--
	}
}

// skipReserved skips an entity that already holds a run slot, and gives
// the slot back.
func (f *fanOut) skipReserved(id string, pos int) {
	<-f.ts.slots
	f.skip(id, pos)
}

// firstChunk is the index in ids of the first entity to start a chunk.
func (sk skipped) firstChunk() int { return (chunkSize - sk.pos%chunkSize) % chunkSize }

// revisit comes back to the parts of the stream the fan-out skipped: the
// entities of chunks another replica took count as already run, the others
// are tried as any other (the replica that was ahead may have died, or be
// slower). Each round asks about all the skipped chunks in one round trip;
// one may skip again, the last does not.
func (f *fanOut) revisit() error {
	for round := 1; len(f.ahead.skipped) > 0 && f.ctx.Err() == nil; round++ {
		f.ahead.jump, f.ahead.lastRound = 0, round >= revisitRounds
		skipped := f.ahead.skipped
		f.ahead.skipped = nil
		if err := f.revisitRound(skipped); err != nil {
			return err
		}
		f.flush()
	}
	return nil
}

// revisitRounds bounds the rounds of revisit.
const revisitRounds = 4

func (f *fanOut) revisitRound(skipped []skipped) error {
	var names []string
	for _, sk := range skipped {
		for lo := sk.firstChunk(); lo+chunkSize <= len(sk.ids); lo += chunkSize {
			names = append(names, chunkName(sk.ids[lo:lo+chunkSize]))
		}
	}
	taken, err := f.s.store.Taken(f.ctx, f.ts.t.Name, f.T, names)
	if err != nil {
		// Not knowing is no answer: the chunks are sent again, and those
		// taken are answered so.
		f.s.log.Debug("cannot read the tick's taken chunks", KeyTask, f.ts.t.Name, tickAttr(f.T), KeyError, err)
		taken = nil
	}
	c := 0 // the chunk's index in names and taken
	for _, sk := range skipped {
		next := sk.firstChunk() // where the next whole chunk starts
		for i := 0; i < len(sk.ids); {
			if i == next && i+chunkSize <= len(sk.ids) {
				next += chunkSize
				c++
				if c <= len(taken) && taken[c-1] {
					f.n.AlreadyRan += chunkSize
					i += chunkSize
					continue
				}
			}
			if err := f.addAt(sk.ids[i], sk.pos+i); err != nil {
				return err
			}
			i++
		}
	}
	return nil
}

// reserve takes a run slot, flushing the batch before it waits for one: the
// batch's answers may free slots. Without one, it says why: the fan-out
// skips ahead (a batch it flushed was taken whole), or stops.
func (f *fanOut) reserve() reservation {
	if f.ahead.jump > 0 {
		return f.skippingUnlessStopped()
	}
	select {
	case f.ts.slots <- struct{}{}:
		return gotSlot
	default:
	}
	if f.flushWhole() {
		if f.ahead.jump > 0 {
			return f.skippingUnlessStopped()
		}
		// The partial chunk kept waits for the rest of it, unless no slot
		// frees soon: the others may be held by another fan-out's.
		t := time.NewTimer(tailWait)
		select {
		case f.ts.slots <- struct{}{}:
			t.Stop()
			return gotSlot
		case <-f.ctx.Done():
			t.Stop()
			return stopped
		case <-t.C:
		}
	}
	f.flush()
	if f.ahead.jump > 0 {
		return f.skippingUnlessStopped()
	}
	select {
	case f.ts.slots <- struct{}{}:
		return gotSlot
	case <-f.ctx.Done():
		return stopped
	}
}

// skippingUnlessStopped: a fan-out that stops does not skip.
func (f *fanOut) skippingUnlessStopped() reservation {
	if f.ctx.Err() != nil {
		return stopped
	}
	return skipping
}

// tailWait bounds how long the partial chunk at a batch's end (flushWhole)
// waits for a run slot before it is sent alone.
const tailWait = 10 * time.Millisecond

// flushWhole flushes the batch but for the part of a chunk at its end, if
// it ends inside a chunk and holds more than that part: a chunk cut between
// two batches is sent entity by entity, so every replica reads its
// entities' records (docs/performance.md). It answers whether it flushed; the
// part kept stays in the batch, or is skipped when the batch was taken
// whole.
func (f *fanOut) flushWhole() bool {
	end := f.first + len(f.batch)
	cut := end/chunkSize*chunkSize - f.first
	if !f.chunked || cut <= 0 || cut >= len(f.batch) {
		return false
	}
	tail := slices.Clone(f.batch[cut:])
	f.batch = f.batch[:cut]
	f.flush()
	f.first = end - len(tail)
	if f.ahead.jump > 0 {
		for i, id := range tail {
			f.skipReserved(id, f.first+i)
		}
		return true
	}
	f.batch = append(f.batch, tail...)
	return true
}

// flush tries the batch's leases and starts a run for each one granted; the
// slots of the others are given back.
func (f *fanOut) flush() {
	if len(f.batch) == 0 {
		return
	}
	s, ts, t := f.s, f.ts, f.ts.t
	reqs := f.reqs[:0]
	for _, id := range f.batch {
		reqs = append(reqs, lease.Request{Task: t.Name, Entity: id, TTL: t.LeaseTTL, Reason: lease.ReasonTick, Tick: f.T, Queue: t.OnBusy == OnBusyQueue})
	}
	f.reqs = reqs
	if f.chunked {
		f.markChunks(reqs)
	}
	res := s.acquireRetrying(f.ctx, ts, f.T, reqs)
	if f.chunked && !f.ahead.lastRound && takenWhole(reqs, res) {
		f.ahead.jump = jumpChunks
	}
	for i, r := range res {
		switch {
		case r.Err == nil:
			f.n.Started++
			s.start(ts, r.Lease)
			continue
		case errors.Is(r.Err, lease.ErrBusy):
			f.n.Busy++
			s.log.Debug("entity busy: skipped", KeyTask, t.Name, KeyEntity, f.batch[i], tickAttr(f.T), KeyError, r.Err)
		case errors.Is(r.Err, lease.ErrAlreadyRan):
			f.n.AlreadyRan++
			s.log.Debug("tick already ran for entity", KeyTask, t.Name, KeyEntity, f.batch[i], tickAttr(f.T))
		case errors.Is(r.Err, lease.ErrQuarantine):
			f.n.Quarantined++
		case errors.Is(r.Err, lease.ErrNotAcknowledged):
			f.n.Unacknowledged++
		default:
			f.n.Errors++
		}
		<-ts.slots
	}
	f.batch = f.batch[:0]
}

// takenWhole says whether another replica took the batch's chunks (it held
// one at least) and ran the rest.
func takenWhole(reqs []lease.Request, res []lease.Result) bool {
	chunk := false
	for i, r := range res {
		if !errors.Is(r.Err, lease.ErrAlreadyRan) {
			return false
		}
		chunk = chunk || reqs[i].Chunk != ""
	}
	return chunk
}

// markChunks names each whole chunk in the batch by its ids, each with its
// length (the store sends a hash of the name): replicas that read the same
// ids in the same order name it alike.
func (f *fanOut) markChunks(reqs []lease.Request) {
	first, end := f.first, f.first+len(reqs) // the stream positions of reqs
	for k := (first + chunkSize - 1) / chunkSize; (k+1)*chunkSize <= end; k++ {
		lo := k*chunkSize - first
		id := chunkName(f.batch[lo : lo+chunkSize])
		for i := lo; i < lo+chunkSize; i++ {
			reqs[i].Chunk = id
		}
	}
}

// chunkName names a chunk by its ids.
func chunkName(ids []string) string {
	var name []byte
	for _, id := range ids {
		name = strconv.AppendInt(name, int64(len(id)), 10)
		name = append(append(name, ':'), id...)
	}
	return string(name)
}

// spreadOut adds entities in the order of their spread offsets, each at
// T + offset (rounded up to the millisecond). It reads the whole source first, into
// one byte arena of length-prefixed ids and an 8-byte entry per entity
// (its id's position, its offset): a million ids of a dozen bytes fit in
// about 21 MB, where a string and an offset each took 48 (docs/performance.md).
// The peak is at the end of the reading, when the Go GC lets the heap grow
// to twice what is live.
func (f *fanOut) spreadOut() error {
	ctx, ts := f.ctx, f.ts
	type item struct {
		start uint32 // the id's length (uvarint) and bytes start at arena[start]
		off   uint32 // ms
	}
	var arena []byte
	var items []item
	if err := ts.source.Each(ctx, func(id string) error {
		if len(arena)+binary.MaxVarintLen64+len(id) > math.MaxUint32 {
			return errors.New("spread: the entity ids exceed 4 GiB")
		}
		start := uint32(len(arena))
		arena = append(binary.AppendUvarint(arena, uint64(len(id))), id...)
		off := (SpreadOffset(ts.t.Name, id, ts.t.Spread) + time.Millisecond - 1) / time.Millisecond // never before the offset
		items = append(items, item{start, uint32(off)})
		return nil
	}); err != nil {
		return err
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.off, b.off) })
	for _, it := range items {
		if d := f.T.Add(time.Duration(it.off) * time.Millisecond).Sub(f.s.clock.Now()); d > 0 {
			f.flush()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(d):
			}
		}
		n, k := binary.Uvarint(arena[it.start:])
		from := int(it.start) + k
		if err := f.add(string(arena[from : from+int(n)])); err != nil {
			return err
		}
	}
	return nil
}

// acquireRetrying acquires a batch; while Redis fails, it retries with
// backoff as long as the tick may still run (the catch-up window, at least
// 10s). Requests still failing are returned with their errors.
func (s *Scheduler) acquireRetrying(ctx context.Context, ts *taskState, T time.Time, reqs []lease.Request) []lease.Result {
	res := s.store.AcquireBatch(ctx, reqs)
	backoff := 100 * time.Millisecond
	for {
		// Busy and already-ran are answers; anything else is retried.
		var pending []int
		var early, failed error
		var quarantine *lease.QuarantineError
		var ee *lease.EarlyError // out of the loop: errors.As makes them escape
		var qe *lease.QuarantineError
		wait := backoff
		for i, r := range res {
			switch {
			case r.Err == nil, errors.Is(r.Err, lease.ErrBusy), errors.Is(r.Err, lease.ErrAlreadyRan):
				continue
			case errors.Is(r.Err, lease.ErrNotAcknowledged):
				continue // an answer: the store handed the run over (OnAcks logs it)
			case errors.As(r.Err, &ee):
				// This clock runs ahead of Redis's: wait for the tick.
				early = r.Err
				wait = max(wait, min(ee.Wait, 2*time.Second))
			case errors.As(r.Err, &qe):
				// Not a Redis error: a first start, or a data loss.
				quarantine = qe
				wait = max(wait, min(qe.Left, 2*time.Second))
			default:
				failed = r.Err
			}
			pending = append(pending, i)
		}
		if quarantine != nil {
			s.quarantined(quarantine.Left)
		}
		if early != nil {
			s.logLimited("early:"+ts.t.Name, "tick not yet due by Redis's clock: is this host's clock ahead?", KeyTask, ts.t.Name, tickAttr(T), KeyError, early)
		}
		if failed != nil {
			s.storeFailed("acquire", "acquire:"+ts.t.Name, "cannot acquire leases; retrying", Event{Task: ts.t.Name, Tick: T}, failed)
		}
		if len(pending) == 0 || s.clock.Now().Sub(T) > ts.t.LateLimit() {
			return res
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
		retry := make([]lease.Request, len(pending))
		for j, i := range pending {
			retry[j] = reqs[i]
			retry[j].Chunk = "" // a retry may hold part of a chunk: entity by entity
		}
		for j, r := range s.store.AcquireBatch(ctx, retry) {
			res[pending[j]] = r
		}
	}
}
