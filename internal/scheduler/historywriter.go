package scheduler

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/leaseconf"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tasks"
)

// The history (docs/operations.md, "History"): this replica's part of each
// tick is tallied in memory while the tick goes on, and written when its
// fan-out starts (before any run: begin), when it ends, and when the last
// run it started ends: a few writes a tick, never one per run. Failed runs
// are gathered and written in batches. A writer goroutine does all but the
// first write, so a slow or unreachable Redis delays only the history: what
// it cannot write is kept (the newest, up to a bound) and written when
// Redis answers.

// tally is this replica's part of one tick of one task, as it goes on.
type tally struct {
	task string
	tick time.Time
	keep driver.Retention
	// pending counts the runs the fan-out started that have not ended; one
	// more while the fan-out goes on.
	pending  atomic.Int64
	outcomes [driver.NumOutcomes + 1]atomic.Int64 // by index in driver.AllOutcomes; the last: any other
	// firstStart and lastEnd, in ns after the tick; -1: none yet.
	firstStart, lastEnd atomic.Int64
	// fanOutSpan is the tick's latest fan-out span on this replica, which
	// its runs' spans are children of; nil when tickd does not trace.
	fanOutSpan atomic.Pointer[telemetry.FanOut]
	// waited counts the runs of the tick that waited for a limit and then
	// started here, after the fan-out.
	waited atomic.Int64
	// process is, for a late part (the runs of a tick that waited for a
	// limit, counted by a process that no longer keeps the tick's fan-out
	// part, or never had one), its own process key: a part never replaces
	// another's counts. "" for a fan-out's part.
	process string

	mu sync.Mutex // counts, the fan-outs'
	n  TickCounts
	// live is the fan-out's counts so far, written while it goes on (at
	// most every liveEvery); n replaces them when it ends.
	live     TickCounts
	liveAt   time.Time
	liveHeld bool // a write of live is due at liveAt + liveEvery
	// fannedOut counts the fan-outs of the tick that ended: a reload may
	// fan a tick out again, and both fan-outs count in one part.
	fannedOut int
	// late counts what became of the tick's runs that waited for a limit,
	// by skip reason (superseded, busy, already_ran), and, negative,
	// SkipLimited for each that no longer waits: summed over the parts, a
	// tick's limited count is the runs still waiting.
	late map[string]int
	used time.Time // a late part's last count, for keeping it (h.mu)
}

// outcomeIndex is o's index in tally.outcomes.
func outcomeIndex(o driver.Outcome) int {
	if i := o.Index(); i >= 0 {
		return i
	}
	return driver.NumOutcomes
}

// part is the tally as a driver.TickPart written at now.
func (tl *tally) part(replica, process string, now time.Time) driver.TickPart {
	tl.mu.Lock()
	n := tl.n
	if tl.fannedOut == 0 {
		n = tl.live
	}
	late := maps.Clone(tl.late)
	tl.mu.Unlock()
	if tl.process != "" {
		process = tl.process
	}
	p := driver.TickPart{Replica: replica, Process: process, Final: tl.pending.Load() == 0, Written: now, Entities: n.Entities,
		Started: n.Started + int(tl.waited.Load()), SourceFailed: n.SourceFailed, SourceError: n.SourceError, Zones: n.Zones,
		Outcomes: map[driver.Outcome]int{}, Skipped: map[string]int{}}
	all := driver.AllOutcomes()
	for i := range tl.outcomes {
		if c := int(tl.outcomes[i].Load()); c > 0 {
			o := driver.Outcome("other")
			if i < driver.NumOutcomes {
				o = all[i]
			}
			p.Outcomes[o] = c
		}
	}
	for reason, c := range map[string]int{history.SkipBusy: n.Busy, history.SkipReplacing: n.Replacing, driver.SkipAlreadyRan: n.AlreadyRan, history.SkipSuperseded: n.Superseded,
		history.SkipQuarantined: n.Quarantined, history.SkipNotAcknowledged: n.Unacknowledged, history.SkipError: n.Errors,
		driver.SkipLimited: n.Limited, history.SkipUnknownZone: n.UnknownZone} {
		if c > 0 {
			p.Skipped[reason] = c
		}
	}
	if n.Stopped || n.Paused || n.Removed {
		// The entities the fan-out did not come to.
		why := history.SkipStopped
		switch {
		case n.Paused:
			why = history.SkipPaused
		case n.Removed:
			why = history.SkipRemoved
		}
		if left := n.Entities - n.Started - n.Busy - n.Replacing - n.AlreadyRan - n.Superseded - n.Quarantined - n.Unacknowledged - n.Errors - n.Limited - n.UnknownZone; left > 0 {
			p.Skipped[why] = left
		}
	}
	for reason, c := range late {
		if p.Skipped[reason] += c; p.Skipped[reason] == 0 {
			delete(p.Skipped, reason)
		}
	}
	p.FirstStart = time.Duration(tl.firstStart.Load())
	p.LastEnd = time.Duration(tl.lastEnd.Load())
	return p
}

// historyWriter writes this replica's part of the history.
type historyWriter struct {
	s *Scheduler

	mu      sync.Mutex
	parts   map[tallyKey]driver.TickWrite // to write: the newest part of each tick
	fails   []driver.Failure              // to write, oldest first
	dropped int                           // not written since the last log line: over the bounds
	wake    chan struct{}
	// written are the parts written within rewriteWithin, by tick: after a
	// data loss (Redis restarted empty, a failover that lost writes) they
	// are written again, so the records of the ticks around it are whole.
	written map[tallyKey]driver.TickWrite
	// tallies are the ticks fanned out within rewriteWithin: a tick fanned
	// out again after a reload counts in the same tally (again).
	tallies map[tallyKey]*tally
	// late are the late parts (tally.process) counted within lateKeep, at
	// most maxLate; lateN numbers them.
	late  map[tallyKey]*tally
	lateN int
}

// rewriteWithin is how far back the parts written are kept, to be written
// again after a data loss: the loss is found within about a second.
const rewriteWithin = time.Minute

type tallyKey struct {
	task string
	tick int64 // Unix ns
	// part is the process key of a part of its own (tally.process: a
	// late part's, a backfill's), "" for the fan-out's: one part's write
	// waiting never stands for another's.
	part string
}

// The bounds of what waits to be written while Redis does not answer: the
// newest are kept.
const (
	maxPendingParts = 1000
	maxPendingFails = 1000
)

func newHistoryWriter(s *Scheduler) *historyWriter {
	return &historyWriter{s: s, parts: map[tallyKey]driver.TickWrite{}, written: map[tallyKey]driver.TickWrite{}, tallies: map[tallyKey]*tally{},
		late: map[tallyKey]*tally{},
		wake: make(chan struct{}, 1)}
}

// beginWait bounds how long a fan-out waits for its first write.
const beginWait = 500 * time.Millisecond

// begin starts the tally of tick T of t, and writes that the replica takes
// part before the fan-out starts a run: a replica killed during the tick
// then leaves its unfinished part, and the tick shows as incomplete, not
// as complete without its runs. It is the one history write a fan-out
// waits for: one round trip a tick (its first run starts that much later),
// at most beginWait; one not written by then is left to the writer.
//
// A backfill's fan-out (its id in backfill) has a part of its own, beside
// the live fan-out's, which it never replaces.
func (h *historyWriter) begin(ctx context.Context, t config.Task, T time.Time, backfill string) *tally {
	if backfill == "" {
		if tl := h.again(t.Name, T); tl != nil {
			return tl
		}
	}
	tl := &tally{task: t.Name, tick: T, keep: leaseconf.Retention(&t), liveAt: h.s.clock.Now()}
	if backfill != "" {
		tl.process = h.s.store.Process() + ".backfill:" + backfill
	}
	tl.firstStart.Store(-1)
	tl.lastEnd.Store(-1)
	tl.pending.Store(1) // the fan-out
	if backfill == "" {
		h.keepTally(tl)
	}
	w := driver.TickWrite{Task: tl.task, Tick: tl.tick, Part: tl.part(h.s.replica, h.s.store.Process(), h.s.clock.Now()), Keep: tl.keep}
	wctx, cancel := context.WithTimeout(ctx, beginWait)
	defer cancel()
	if h.s.store.Fleet().RecordTicks(wctx, []driver.TickWrite{w}) != nil {
		h.put(tl)
	} else {
		h.wrote(map[tallyKey]driver.TickWrite{{tl.task, tl.tick.UnixNano(), tl.process}: w})
	}
	return tl
}

// again is the tally of a tick of task this process fanned out before (a
// reload fans the tick out once more), counted for one more fan-out, or
// nil. Tallies are kept for rewriteWithin.
func (h *historyWriter) again(task string, T time.Time) *tally {
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := T.Add(-rewriteWithin)
	maps.DeleteFunc(h.tallies, func(_ tallyKey, tl *tally) bool { return tl.tick.Before(cut) })
	k := tallyKey{task, T.UnixNano(), ""}
	if tl := h.tallies[k]; tl != nil {
		tl.pending.Add(1)
		return tl
	}
	return nil
}

// keepTally keeps tl for again.
func (h *historyWriter) keepTally(tl *tally) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tallies[tallyKey{tl.task, tl.tick.UnixNano(), ""}] = tl
}

// wrote keeps the parts written, and forgets those older than
// rewriteWithin.
func (h *historyWriter) wrote(parts map[tallyKey]driver.TickWrite) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, w := range parts {
		if old, ok := h.written[k]; !ok || !old.Part.Written.After(w.Part.Written) {
			h.written[k] = w
		}
	}
	cut := h.s.clock.Now().Add(-rewriteWithin)
	maps.DeleteFunc(h.written, func(_ tallyKey, w driver.TickWrite) bool { return w.Part.Written.Before(cut) })
}

// lost writes again the parts written lately: Redis lost its data (the
// store's data-loss watch found it), and with it the records of the ticks
// just before. A part queued since is newer, and kept.
func (h *historyWriter) lost() {
	h.mu.Lock()
	for k, w := range h.written {
		if _, newer := h.parts[k]; !newer {
			h.parts[k] = w
		}
	}
	h.bound()
	h.mu.Unlock()
	h.poke()
}

// fannedOut ends the fan-out's part of tl with its counts.
func (h *historyWriter) fannedOut(tl *tally, n TickCounts) {
	tl.mu.Lock()
	if tl.fannedOut > 0 { // another fan-out of the tick, before a reload: both count
		prev := tl.n
		n.Entities = max(n.Entities, prev.Entities)
		n.Started += prev.Started
		n.AlreadyRan = max(0, n.AlreadyRan-prev.Started) // those this replica ran before
	}
	tl.n = n
	tl.fannedOut++
	tl.mu.Unlock()
	tl.pending.Add(-1)
	h.put(tl)
}

// started notes that a run of tl started at d after the tick.
func (tl *tally) started(d time.Duration) {
	for {
		cur := tl.firstStart.Load()
		if cur >= 0 && cur <= int64(d) || tl.firstStart.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// ended notes a run of tl's end, at d after the tick, and writes the part
// when it was the last.
func (h *historyWriter) ended(tl *tally, o driver.Outcome, d time.Duration) {
	tl.outcomes[outcomeIndex(o)].Add(1)
	for {
		cur := tl.lastEnd.Load()
		if cur >= int64(d) || tl.lastEnd.CompareAndSwap(cur, int64(d)) {
			break
		}
	}
	if tl.pending.Add(-1) == 0 {
		h.put(tl)
	}
}

// put queues tl's part for writing, over its earlier one.
func (h *historyWriter) put(tl *tally) {
	w := driver.TickWrite{Task: tl.task, Tick: tl.tick, Part: tl.part(h.s.replica, h.s.store.Process(), h.s.clock.Now()), Keep: tl.keep}
	h.mu.Lock()
	h.parts[tallyKey{tl.task, tl.tick.UnixNano(), tl.process}] = w
	h.bound()
	h.mu.Unlock()
	h.poke()
}

// bound keeps what waits to be written within its bounds, the newest: it
// forgets the parts of the oldest ticks and the oldest failures, and counts
// them. h.mu is held.
func (h *historyWriter) bound() {
	for len(h.parts) > maxPendingParts {
		var oldest tallyKey
		first := true
		for k := range h.parts {
			if first || k.tick < oldest.tick {
				oldest, first = k, false
			}
		}
		delete(h.parts, oldest)
		h.dropped++
	}
	if over := len(h.fails) - maxPendingFails; over > 0 {
		h.dropped += over
		h.fails = slices.Delete(h.fails, 0, over)
	}
}

// failed queues a failed run for writing.
func (h *historyWriter) failed(f driver.Failure) {
	h.mu.Lock()
	h.fails = append(h.fails, f)
	h.bound()
	h.mu.Unlock()
	h.poke()
}

func (h *historyWriter) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// historyBatch is how long the writer gathers what comes before it writes:
// the parts of a tick's many run ends are one write.
const historyBatch = 200 * time.Millisecond

// loop writes what is queued until ctx ends, then once more, briefly.
func (h *historyWriter) loop(ctx context.Context) {
	backoff := retry.Backoff{First: time.Second, Max: 10 * time.Second}
	for {
		select {
		case <-ctx.Done():
			h.final()
			return
		case <-h.wake:
		}
		select {
		case <-ctx.Done():
			continue // the stop's own flush writes it
		case <-time.After(historyBatch):
		}
		if err := h.flush(ctx); err != nil {
			if ctx.Err() == nil { // a write cut short by the stop is the stop's flush's to say
				h.s.storeFailed("history", "history", "cannot write the history; will retry", Event{}, err)
			}
			backoff.Wait(ctx.Done()) // what failed is kept: try again after it, or at the stop's flush
			h.poke()
			continue
		}
		backoff.Reset()
	}
}

// final is the stop's flush: what is queued gets 2s more, and only what
// even that could not write is said, at ERROR.
func (h *historyWriter) final() {
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.flush(fctx); err != nil {
		h.mu.Lock()
		parts, fails := len(h.parts), len(h.fails)
		h.mu.Unlock()
		h.s.log.Error("history not written before stopping: these records are lost", "tick_parts", parts, "failures", fails, logs.KeyError, err)
	}
}

// flush writes what is queued; what it could not write stays queued, unless
// newer came for the same tick. The caller says why it failed.
func (h *historyWriter) flush(ctx context.Context) error {
	h.mu.Lock()
	parts, fails, dropped := h.parts, h.fails, h.dropped
	h.parts, h.fails, h.dropped = map[tallyKey]driver.TickWrite{}, nil, 0
	h.mu.Unlock()
	if dropped > 0 {
		h.s.logLimited("history-dropped", "history records dropped: Redis did not take them in time", "dropped", dropped)
	}
	if len(parts) == 0 && len(fails) == 0 {
		return nil
	}
	ws := make([]driver.TickWrite, 0, len(parts))
	for _, w := range parts {
		ws = append(ws, w)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The failures first: a tick's part written final wakes the heartbeat's
	// judge (beats.wrote), whose /fail body names the tick's failed
	// entities from them (a race: the body lacked them).
	var err error
	if len(fails) > 0 {
		if err = h.s.store.Fleet().RecordFailures(wctx, fails, h.s.retention); err == nil {
			fails = nil // written: not queued again
		}
	}
	if err == nil {
		err = h.s.store.Fleet().RecordTicks(wctx, ws)
	}
	if err == nil {
		h.wrote(parts)
		h.s.beats.wrote(parts)
		return nil
	}
	h.mu.Lock()
	for k, w := range parts {
		if _, newer := h.parts[k]; !newer {
			h.parts[k] = w
		}
	}
	h.fails = append(fails, h.fails...)
	h.bound()
	h.mu.Unlock()
	return err
}

// retention is task's history retention in the config in force.
func (s *Scheduler) retention(task string) driver.Retention {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.tasks[task]; ok {
		return leaseconf.Retention(&ts.t)
	}
	return leaseconf.Retention(&s.cfg.Defaults)
}

// failure is r's run as a driver.Failure.
func (r *running) failure(started, ended time.Time, text string) driver.Failure {
	l := r.l
	return driver.Failure{Task: r.ts.t.Name, Entity: l.Entity, Tick: l.Tick.UTC(), Reason: l.Reason, Fence: l.Fence,
		Replica: r.s.replica, Started: started.UTC(), Ended: ended.UTC(), Outcome: r.outcome, Error: text,
		Output: tasks.OutputOf(r.err)}
}
