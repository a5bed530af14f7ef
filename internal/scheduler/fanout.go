package scheduler

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// TickCounts says what one tick of a task did with its entities.
type TickCounts struct {
	Entities int // read from the source
	Started  int // runs started on this replica
	Busy     int // skipped: the lease was held
	// Replacing: the lease was held and its holder revoked (on_busy =
	// "replace"): the run starts once the holder has ended.
	Replacing  int
	AlreadyRan int // skipped: another replica ran this tick
	// Superseded: skipped, a newer tick of the entity ran already (a
	// replica on a newer schedule, or this fan-out came late).
	Superseded int
	// Quarantined: no lease while Redis holds no tickd state (a first
	// start, or a data loss) until the tick became too late to start.
	Quarantined int
	// Unacknowledged: granted, but the Redis replicas did not acknowledge
	// the grant (replica_acks), so nothing started; each was handed over
	// as a due run for when they do.
	Unacknowledged int
	Errors         int // no lease: the store failed, and the tick became too late
	// Limited: a limit the task names had no room; each run waits as a due
	// run, with its tick, until it has.
	Limited int
	// UnknownZone: skipped, the entity's zone attribute (timezone_from)
	// names no zone; counted at the ticks of the task's own zone.
	UnknownZone int
	// Zones are the zones whose entities the tick served, for a task with
	// timezone_from: "" for the task's own.
	Zones []string
	// SourceFailed: the entity source failed (the entities read before the
	// failure were run).
	SourceFailed bool
	SourceError  string // why it failed
	// Stopped: shutdown stopped the fan-out before it had read and run its
	// whole source; Entities counts those read until then.
	Stopped bool
	// Paused: tickd pause stopped it so (the runs started go on).
	Paused bool
	// Removed: a reload took the task out of the config, and stopped it so.
	Removed bool
}

// fanOut is one tick T of one task being fanned out: entities are read from
// the source, gathered into batches only as large as the free run slots (so
// a busy replica leaves entities to idle ones), and each batch's leases are
// tried in one round trip.
type fanOut struct {
	s      *Scheduler
	ts     *taskState
	T      time.Time
	reason driver.Reason // the runs': tick, or catch_up (an older tick missed)
	ctx    context.Context
	tl     *tally      // this replica's part of the tick, for the history
	n      *TickCounts // the tick's, shared by its shards' streams
	batch  []string
	reqs   []driver.Request // flush's, reused: the store keeps none of them
	// attrs are the attributes of the entities read and not yet started
	// or passed over, by id: the tick's, shared by its shards' streams,
	// and only touched by the fan-out's goroutine. nil for a source of
	// bare ids, which costs nothing more.
	attrs map[string]tasks.Attributes
	// zones, for a task with timezone_from, says which entities tick at T.
	zones *zoneFilter
	// A task of several shards is fanned out one stream per shard: each
	// entity goes to its shard's (driver.ShardOf), so that a batch is one
	// shard's, one script call. name is the driver's name of this stream's
	// shard (driver.ShardName). While deferFailed, a batch is tried once,
	// and what Redis failed (or quarantined) is kept in failed for a last
	// pass, so that a shard whose master does not answer holds up none of
	// the others.
	name        string
	deferFailed bool
	failed      []skipped
	// busy are the entities a catch-up or a backfill found busy, asked
	// again (retryHeld) until until; limited, those a limit had no room
	// for, until limitUntil (zero: as long as the fan-out goes on).
	busy       []string
	limited    []heldBack
	until      time.Time
	limitUntil time.Time
	// only, for a backfill of some entities, are they (nil: every one);
	// recordOf, the record of its own that decides its runs (catchUp's).
	only     map[string]bool
	recordOf string
	// In a fan-out in source order (no spread), the stream is cut into
	// chunks of chunk entities (chunkFor; 0: not cut): a batch that holds a
	// whole chunk sends it as a chunk (driver.Request.Chunk), which only
	// one replica takes.
	chunk int
	pos   int // the stream position of the next entity read
	first int // the stream position of batch[0]
	// A batch whose chunks another replica took, all of them, says that
	// replica reads this part of the stream now: rather than follow it and
	// lose each chunk to it, this fan-out skips ahead, and comes back to
	// what it skipped once the stream ends (revisit).
	ahead skipAhead
	wait  *time.Timer // slotWithin's (made at its first wait)
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

// fanOut runs tick T of ts; of the zones of only, when it is not nil. It
// returns what the tick did, and its tally, whose pending runs are those
// still going.
func (s *Scheduler) fanOut(ctx context.Context, ts *taskState, c catchUp) (TickCounts, *tally) {
	ctx, done := ts.fanOuts.begin(ctx, ts)
	defer done()
	T, only := c.T, c.zones
	f := &fanOut{s: s, ts: ts, T: T, reason: cmp.Or(c.reason, driver.ReasonTick), ctx: ctx, tl: s.history.begin(ctx, ts.t, T, c.backfill), n: &TickCounts{}, name: ts.t.Name}
	if f.reason == driver.ReasonTick {
		s.liveFanOuts.Add(1)
		s.liveSince.Store(s.clock.Now().UnixNano())
		defer s.liveFanOuts.Add(-1)
	}
	f.heldUntil(c)
	if _, ok := ts.source.(tasks.EntitySource); ok {
		f.attrs = map[string]tasks.Attributes{} // shared by the shards' streams
	}
	if ts.zones != nil {
		f.zones = newZoneFilter(ts.zones, T, only)
	}
	if len(ts.t.Limits) > 0 && f.reason == driver.ReasonTick {
		ts.tally.Store(f.tl) // the live tick's: a waiting run of an older one is superseded
	}
	if f.reason != driver.ReasonBackfill {
		s.beats.began(&ts.t, T)
	}
	span := s.tracer.StartFanOut(ts.t.Name, T)
	if span != nil {
		f.tl.fanOutSpan.Store(span)
	}
	var err error
	if ts.t.Spread > 0 {
		err = f.spreadOut()
		if rerr := f.retryHeld(); err == nil {
			err = rerr
		}
	} else {
		err = f.inOrder()
	}
	f.flush()
	t := ts.t
	if ctx.Err() != nil {
		err = nil // stopped by shutdown, pause or the task's removal: not the source's failure
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errPaused):
			f.n.Paused = true
		case errors.Is(cause, errRemoved):
			f.n.Removed = true
		default:
			f.n.Stopped = true
		}
	}
	if err != nil {
		s.log.Error("entity source failed", logs.KeyTask, t.Name, logs.Tick(T), logs.KeyError, err)
		f.n.SourceFailed, f.n.SourceError = true, err.Error()
	}
	if f.zones != nil {
		f.n.Zones = f.zones.served(t.Timezone)
	}
	n := *f.n
	span.End(n.Entities, n.Started, n.SourceError)
	s.history.fannedOut(f.tl, n)
	s.metrics.Ticked(t.Name, T, n, err)
	lvl := slog.LevelInfo
	if n.Errors > 0 || n.SourceFailed || n.Quarantined > 0 {
		lvl = slog.LevelWarn
	}
	attrs := []any{logs.KeyTask, t.Name, logs.Tick(T),
		"entities", n.Entities, "started", n.Started, "busy", n.Busy, "replacing", n.Replacing, "already_ran", n.AlreadyRan, "superseded", n.Superseded, "limited", n.Limited,
		"quarantined", n.Quarantined, "unacknowledged", n.Unacknowledged, "errors", n.Errors, "source_failed", n.SourceFailed,
		"stopped", n.Stopped, "paused", n.Paused, "removed", n.Removed}
	if f.zones != nil { // a task whose entities tick in zones of their own
		attrs = append(attrs, "zones", len(n.Zones), "unknown_zone", n.UnknownZone)
	}
	s.log.Log(context.Background(), lvl, "tick", attrs...)
	s.observe(Event{Kind: EventTick, Task: t.Name, Tick: T, Counts: n})
	return n, f.tl
}

// inOrder fans the source out in its order, in chunks, one stream per
// shard of the task. A shard's entities are handed to its stream a whole
// batch at a time, and sent: each stream's batches are as large as the
// free run slots, not a part of them.
func (f *fanOut) inOrder() error {
	streams := f.shardStreams()
	sh := f.s.shareOf(f.ctx, f.ts.t.Name, len(streams))
	add := f.add
	pending := make([][]string, len(streams))
	if len(streams) > 1 {
		add = func(id string) error {
			s := driver.ShardOf(id, len(streams))
			if !sh.mine(s) {
				streams[s].setAside(id)
				return nil
			}
			if pending[s] = append(pending[s], id); len(pending[s]) < driver.BatchSize {
				return nil
			}
			ids := pending[s]
			pending[s] = ids[:0]
			err := streams[s].addAll(ids)
			streams[s].flush() // no stream holds run slots for a batch it has not sent
			return err
		}
	}
	err := f.each(add)
	for s, st := range streams {
		if err == nil {
			err = st.addAll(pending[s])
		}
		st.flush()
	}
	for _, s := range sh.order(len(streams)) {
		if rerr := streams[s].revisit(); err == nil {
			err = rerr
		}
	}
	for _, st := range streams {
		if rerr := st.retryFailed(); err == nil {
			err = rerr
		}
		if rerr := st.retryHeld(); err == nil {
			err = rerr
		}
	}
	return err
}

// shardStreams are the streams of f's tick: f alone for a task of one
// shard (or while its count cannot be read: the store still puts each
// entity in its shard, a batch may only cost more calls).
func (f *fanOut) shardStreams() []*fanOut {
	t := f.ts.t
	if f.reason == driver.ReasonTick { // a chunk is taken once per tick: a catch-up's is asked entity by entity
		f.chunk = chunkFor(t.Concurrency)
	}
	n, err := f.s.store.Shards(f.ctx, t.Name)
	if err == nil && n != max(t.Shards, 1) && f.ts.shardsSaid.Swap(int64(n)) != int64(n) {
		f.s.log.Warn("the task is kept in another number of shards than its config says, as recorded in Redis: every replica uses the recorded count; `tickd migrate` with this config reshards it (docs/operations.md, \"Shards\")",
			logs.KeyTask, t.Name, "shards", n, "config_shards", t.Shards)
	}
	if err != nil || n <= 1 {
		return []*fanOut{f}
	}
	streams := make([]*fanOut, n)
	streams[0] = f
	for i := 1; i < n; i++ {
		streams[i] = &fanOut{s: f.s, ts: f.ts, T: f.T, reason: f.reason, ctx: f.ctx, tl: f.tl, n: f.n, attrs: f.attrs, chunk: f.chunk, name: driver.ShardName(t.Name, i),
			until: f.until, limitUntil: f.limitUntil, only: f.only, recordOf: f.recordOf}
	}
	for _, st := range streams {
		st.deferFailed = true
	}
	return streams
}

// setAside takes the source's next entity, of another replica's share,
// for revisit.
func (f *fanOut) setAside(id string) {
	f.n.Entities++
	f.pos++
	f.skip(id, f.pos-1)
}

// addAll adds ids, in order.
func (f *fanOut) addAll(ids []string) error {
	for _, id := range ids {
		if err := f.add(id); err != nil {
			return err
		}
	}
	return nil
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
	if len(f.batch) >= driver.BatchSize && !f.flushWhole() {
		f.flush()
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
	f.backfillRoom()
	if len(f.batch) == 0 {
		f.follow()
	}
	select {
	case f.ts.slots <- struct{}{}:
		return gotSlot
	default:
	}
	if f.awaitFill() {
		return gotSlot
	}
	if f.flushWhole() {
		if f.ahead.jump > 0 {
			return f.skippingUnlessStopped()
		}
		// The partial chunk kept waits for the rest of it, unless no slot
		// frees soon: the others may be held by another fan-out's.
		if r, ok := f.slotWithin(tailWait); ok {
			return r
		}
	}
	f.flush()
	if f.ahead.jump > 0 {
		return f.skippingUnlessStopped()
	}
	for { // the batch is empty: a reload's new state may take over
		f.follow()
		select {
		case f.ts.slots <- struct{}{}:
			return gotSlot
		case <-f.ctx.Done():
			return stopped
		case <-f.ts.replaced:
		}
	}
}

// follow goes on under the task's newest state, if a reload replaced the
// one f runs under. It is called while f's batch is empty, so that every
// slot f holds is of one state, and each batch's runs of one config: the
// runs started go on under the old state, the rest of the tick under the
// new one.
func (f *fanOut) follow() {
	for next := f.ts.next.Load(); next != nil; next = f.ts.next.Load() {
		f.ts = next
		if len(next.t.Limits) > 0 && f.reason == driver.ReasonTick {
			next.tally.Store(f.tl)
		}
	}
}

// skippingUnlessStopped: a fan-out that stops does not skip.
func (f *fanOut) skippingUnlessStopped() reservation {
	if f.ctx.Err() != nil {
		return stopped
	}
	return skipping
}

// flush tries the batch's leases and starts a run for each one granted; the
// slots of the others are given back.
func (f *fanOut) flush() {
	if f.nothingToSend() {
		return
	}
	s, ts, t := f.s, f.ts, f.ts.t
	reqs := f.requests()
	if f.chunk > 0 {
		f.markChunks(reqs)
	}
	var res []lease.Result
	if f.deferFailed {
		res = s.store.AcquireBatch(f.ctx, reqs)
	} else {
		res = s.acquireRetrying(f.ctx, ts, f.T, reqs)
	}
	if f.chunk > 0 && !f.ahead.lastRound && takenWhole(reqs, res) {
		f.ahead.jump = jumpEntities / f.chunk
	}
	var waiting []limitedRun
	defer func() { f.waitForLimits(waiting) }()
	for i, r := range res {
		switch {
		case r.Err == nil:
			f.n.Started++
			s.start(ts, r.Lease, f.tl, 0, f.attrsOf(f.batch[i]))
			continue
		case errors.Is(r.Err, lease.ErrBusy):
			if f.busyEntity(f.batch[i], r.Err) {
				<-ts.slots
				continue
			}
		case errors.Is(r.Err, lease.ErrAlreadyRan):
			// A newer tick's run: this tick's was superseded, not run by another.
			if ar := (*lease.AlreadyRanError)(nil); errors.As(r.Err, &ar) && ar.LastTick.After(f.T) {
				f.n.Superseded++
			} else {
				f.n.AlreadyRan++
			}
			s.log.Debug(logs.MsgAlreadyRan, logs.KeyTask, t.Name, logs.KeyEntity, f.batch[i], logs.Tick(f.T))
		case errors.Is(r.Err, driver.ErrNotAcknowledged):
			f.n.Unacknowledged++
		case errors.Is(r.Err, lease.ErrLimited) && driver.ByRecord(f.reason):
			f.limitedEntity(f.batch[i], r.Err)
			<-ts.slots
			continue
		case errors.Is(r.Err, lease.ErrLimited):
			f.n.Limited++
			waiting = append(waiting, limitedRun{driver.Due{Task: t.Name, Entity: f.batch[i], Reason: driver.ReasonTick, Tick: f.T}, r.Err})
		case f.deferFailed: // Redis failed, or quarantines the shard: tried again last
			f.deferOne(f.batch[i], f.first+i)
			<-ts.slots
			continue
		case errors.Is(r.Err, lease.ErrQuarantine):
			f.n.Quarantined++
		default:
			f.n.Errors++
		}
		f.attrsOf(f.batch[i]) // passed over: forgotten
		<-ts.slots
	}
	f.batch = f.batch[:0]
	s.history.progress(f.tl, *f.n)
}

// nothingToSend says whether the batch is empty, or dropped: a fan-out
// stopped (shutdown, a pause, the task's removal) with a batch not sent
// did not come to its entities, as to the rest of the stream (the tick's
// record counts them so), and gives their slots back.
func (f *fanOut) nothingToSend() bool {
	if f.ctx.Err() == nil {
		return len(f.batch) == 0
	}
	for _, id := range f.batch {
		f.attrsOf(id) // passed over: forgotten
		<-f.ts.slots
	}
	f.batch = f.batch[:0]
	return true
}

// deferOne keeps the entity at pos, whose acquire Redis failed (or
// quarantined), for retryFailed.
func (f *fanOut) deferOne(id string, pos int) { f.failed = appendAt(f.failed, id, pos) }
