package scheduler

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/tickd/tickd/schedule"
)

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
	if err := f.each(func(id string) error {
		if len(arena)+binary.MaxVarintLen64+len(id) > math.MaxUint32 {
			return errors.New("spread: the entity ids exceed 4 GiB")
		}
		start := uint32(len(arena))
		arena = append(binary.AppendUvarint(arena, uint64(len(id))), id...)
		off := (schedule.SpreadOffset(ts.t.Name, id, ts.t.Spread) + time.Millisecond - 1) / time.Millisecond // never before the offset
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
