package scheduler

import (
	"maps"
	"strconv"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/leaseconf"
)

// The runs of a tick that waited for a limit, counted in its record
// whichever process runs them and however late (late parts), and a
// fan-out's counts written while it goes on (live counts).

// liveEvery is how often a fan-out writes its counts so far.
const liveEvery = time.Second

// lateAdd counts what became of a run of the tick that waited.
func (tl *tally) lateAdd(reason string, n int) {
	tl.mu.Lock()
	if tl.late == nil {
		tl.late = map[string]int{}
	}
	tl.late[reason] += n
	tl.mu.Unlock()
}

// A late part is kept while its runs go on and lateKeep after its last
// count, at most maxLate of them: a run of its tick that comes later
// counts in a new one.
const (
	lateKeep = 10 * time.Minute
	maxLate  = 10000
)

// tallyFor is the tally that counts the runs of task t's tick T that
// waited for a limit: the fan-out's, while this process keeps it, else a
// late part of this process's.
func (h *historyWriter) tallyFor(t config.Task, T time.Time) *tally {
	now := h.s.clock.Now()
	k := tallyKey{t.Name, T.UnixNano(), ""}
	h.mu.Lock()
	defer h.mu.Unlock()
	if tl := h.tallies[k]; tl != nil {
		return tl
	}
	if tl := h.late[k]; tl != nil {
		tl.used = now
		return tl
	}
	maps.DeleteFunc(h.late, func(_ tallyKey, tl *tally) bool { return tl.pending.Load() == 0 && now.Sub(tl.used) > lateKeep })
	for len(h.late) >= maxLate {
		var oldest tallyKey
		for k, tl := range h.late {
			if o := h.late[oldest]; o == nil || tl.used.Before(o.used) {
				oldest = k
			}
		}
		delete(h.late, oldest)
	}
	h.lateN++
	tl := &tally{task: t.Name, tick: T, keep: leaseconf.Retention(&t), process: h.s.store.Process() + "." + strconv.Itoa(h.lateN), fannedOut: 1, used: now}
	tl.firstStart.Store(-1)
	tl.lastEnd.Store(-1)
	h.late[k] = tl
	return tl
}

// progress keeps the fan-out's counts so far, and writes them at most
// every liveEvery (a write held back is made when its time comes, even if
// the fan-out waits for run slots until then): status and the console show
// a tick's counts while it fans out.
func (h *historyWriter) progress(tl *tally, n TickCounts) {
	now := h.s.clock.Now()
	tl.mu.Lock()
	tl.live = n
	wait := tl.liveAt.Add(liveEvery).Sub(now)
	switch {
	case wait <= 0:
		tl.liveAt = now
	case !tl.liveHeld:
		tl.liveHeld = true
		time.AfterFunc(wait, func() {
			tl.mu.Lock()
			tl.liveHeld, tl.liveAt = false, h.s.clock.Now()
			tl.mu.Unlock()
			h.put(tl)
		})
	}
	tl.mu.Unlock()
	if wait <= 0 {
		h.put(tl)
	}
}

// unbuffered moves, in their ticks' records, the buffered ticks a busy
// acquire's err took out of the entity's buffer (queue_max) from busy,
// which their fan-out counted, to dropped or missed.
func (h *historyWriter) unbuffered(t config.Task, err error) {
	be, ok := err.(*lease.BusyError) // as the store returns it: no errors.As allocation per busy entity
	if !ok || len(be.Dropped)+len(be.Missed) == 0 {
		return
	}
	for why, ticks := range map[string][]time.Time{history.SkipDropped: be.Dropped, history.SkipMissed: be.Missed} {
		for _, T := range ticks {
			tl := h.tallyFor(t, T)
			tl.lateAdd(history.SkipBusy, -1)
			tl.lateAdd(why, 1)
			h.put(tl)
		}
	}
}
