package memdriver

import (
	"context"
	"slices"

	"github.com/tickd/tickd/lease/driver"
)

// RecordTicks is tick.lua's, in Go.
func (b *memDriver) RecordTicks(_ context.Context, ws []driver.TickWrite) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range ws {
		b.tickRecs[w.Task] = putTick(b.tickRecs[w.Task], w)
	}
	return nil
}

// putTick puts w's part into the tick list l (newest first), over its
// replica process's earlier part, and cuts the list to w's retention.
func putTick(l []driver.TickRecord, w driver.TickWrite) []driver.TickRecord {
	tick, part := w.Tick.UnixMilli(), w.Part.Kept()
	placed := false
	for i := range l[:min(len(l), driver.TickScan)] {
		t := l[i].Tick.UnixMilli()
		if t == tick {
			l[i].Parts, placed = putPart(l[i].Parts, part), true
			break
		}
		if t < tick {
			l, placed = slices.Insert(l, i, driver.TickRecord{Tick: driver.MSTime(tick), Parts: []driver.TickPart{part}}), true
			break
		}
	}
	if !placed {
		if len(l) >= driver.TickScan {
			return l
		}
		l = append(l, driver.TickRecord{Tick: driver.MSTime(tick), Parts: []driver.TickPart{part}})
	}
	l = l[:min(len(l), max(w.Keep.Ticks, 1))]
	oldest := w.Part.Written.Add(-w.Keep.Age).UnixMilli()
	for range driver.TickAgeDrop {
		if len(l) == 0 || l[len(l)-1].Tick.UnixMilli() >= oldest {
			break
		}
		l = l[:len(l)-1]
	}
	return l
}

// putPart puts p into parts, over the part of its replica process.
func putPart(parts []driver.TickPart, p driver.TickPart) []driver.TickPart {
	parts = slices.Clone(parts) // a reader may hold the old ones
	for i := range parts {
		if parts[i].Replica == p.Replica && parts[i].Process == p.Process {
			parts[i] = p
			return parts
		}
	}
	return append(parts, p)
}

func (b *memDriver) Ticks(_ context.Context, task string, limit int) ([]driver.TickRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ticks(task, limit), nil
}

// ticks is task's newest tick records, copied; b.mu is held.
func (b *memDriver) ticks(task string, limit int) []driver.TickRecord {
	return newest(b.tickRecs[task], limit)
}

func (b *memDriver) Push(_ context.Context, ps []driver.ListPush) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range ps {
		if len(p.Failures) > 0 {
			b.failures[p.Task] = pushNewest(b.failures[p.Task], p.Failures, p.Keep.Failures)
		}
		if len(p.Actions) > 0 {
			b.actions[p.Task] = pushNewest(b.actions[p.Task], p.Actions, p.Keep.Actions)
		}
	}
	return nil
}

// pushNewest puts vals (oldest first) before l (newest first), and keeps
// its keep newest.
func pushNewest[T any](l, vals []T, keep int) []T {
	out := make([]T, 0, len(l)+len(vals))
	for i := len(vals) - 1; i >= 0; i-- {
		out = append(out, vals[i])
	}
	out = append(out, l...)
	return out[:min(len(out), max(keep, 1))]
}

func (b *memDriver) Failures(_ context.Context, task string, limit int) ([]driver.Failure, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return newest(b.failures[task], limit), nil
}

func (b *memDriver) Actions(_ context.Context, task string, limit int) ([]driver.Action, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.newestActions(task, limit), nil
}

// newestActions is task's newest actions, copied; b.mu is held.
func (b *memDriver) newestActions(task string, limit int) []driver.Action {
	return newest(b.actions[task], limit)
}

func (b *memDriver) Histories(_ context.Context, reads []driver.HistoryRead) (ticks [][]driver.TickRecord, actions [][]driver.Action, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ticks, actions = make([][]driver.TickRecord, len(reads)), make([][]driver.Action, len(reads))
	for i, r := range reads {
		ticks[i], actions[i] = b.ticks(r.Task, r.Ticks), b.newestActions(r.Task, r.Actions)
	}
	return ticks, actions, nil
}

// newest is a copy of l's first limit values (none: empty, not nil).
func newest[T any](l []T, limit int) []T {
	return append([]T{}, l[:min(len(l), limit)]...)
}
