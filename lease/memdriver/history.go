package memdriver

import (
	"context"
	"strconv"
	"strings"

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

// putTick puts w's part into the tick list l (newest first) and cuts it to
// w's retention.
func putTick(l []string, w driver.TickWrite) []string {
	tick := w.Tick.UnixMilli()
	rep, part := driver.PartKey(w.Part), driver.EncodeTickPart(w.Part)
	el := strconv.FormatInt(tick, 10) + " " + part
	placed := false
	for i, old := range l[:min(len(l), driver.TickScan)] {
		ts, _, _ := strings.Cut(old, " ")
		t, _ := strconv.ParseInt(ts, 10, 64)
		if t == tick {
			l[i], placed = driver.MergeTickPart(old, rep, part), true
			break
		}
		if t < tick {
			l, placed = append(l[:i], append([]string{el}, l[i:]...)...), true
			break
		}
	}
	if !placed {
		if len(l) >= driver.TickScan {
			return l
		}
		l = append(l, el)
	}
	l = l[:min(len(l), max(w.Keep.Ticks, 1))]
	oldest := w.Part.Written.Add(-w.Keep.Age).UnixMilli()
	for range driver.TickAgeDrop {
		if len(l) == 0 {
			break
		}
		ts, _, _ := strings.Cut(l[len(l)-1], " ")
		if t, err := strconv.ParseInt(ts, 10, 64); err == nil && t >= oldest {
			break
		}
		l = l[:len(l)-1]
	}
	return l
}

func (b *memDriver) Ticks(_ context.Context, task string, limit int) ([]driver.TickRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.tickRecs[task]
	return driver.DecodeTickRecords(l[:min(len(l), limit)]), nil
}

func (b *memDriver) Push(_ context.Context, list string, ps []*driver.ListPush) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range ps {
		k := list + "\x00" + p.Task
		l := b.lists[k]
		for _, v := range p.Vals {
			l = append([]string{v}, l...)
		}
		b.lists[k] = l[:min(len(l), p.Keep)]
	}
	return nil
}

func (b *memDriver) Histories(ctx context.Context, reads []driver.HistoryRead) (ticks [][]driver.TickRecord, actions [][]string, err error) {
	ticks, actions = make([][]driver.TickRecord, len(reads)), make([][]string, len(reads))
	for i, r := range reads {
		ticks[i], _ = b.Ticks(ctx, r.Task, r.Ticks)
		actions[i], _ = b.List(ctx, driver.ListActions, r.Task, r.Actions)
	}
	return ticks, actions, nil
}

func (b *memDriver) List(_ context.Context, list, task string, limit int) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lists[list+"\x00"+task]
	return append([]string(nil), l[:min(len(l), limit)]...), nil
}
