package redisdriver

import (
	"hash/maphash"
	"math/bits"
	"sync"
)

// twice is the scripts' TWICE for a batch of n requests or leases, the
// k-th of entity field(k): "1" when one field comes twice, so that the
// script reads the second against the value the first wrote; "0" spares
// it keeping what it wrote (docs/performance.md, item 14).
//
// The fields' hashes go into an open-addressed table kept from one batch
// to the next, not into a map made per batch (item 16). Two fields with
// one 64-bit hash answer "1": the script then keeps what it wrote, which
// is always right, only dearer.
func twice(n int, field func(k int) string) string {
	if n < 2 {
		return "0"
	}
	p := seenTables.Get().(*[]uint64)
	defer seenTables.Put(p)
	size := 1 << bits.Len(uint(2*n-1)) // at least 2n slots: probes stay short
	t := *p
	if cap(t) < size {
		t = make([]uint64, size)
		*p = t
	}
	t = t[:size]
	clear(t)
	mask := uint64(size - 1)
	for k := range n {
		h := maphash.String(seenSeed, field(k)) | 1 // 0 marks a free slot
		for i := h & mask; ; i = (i + 1) & mask {
			if t[i] == h {
				return "1"
			}
			if t[i] == 0 {
				t[i] = h
				break
			}
		}
	}
	return "0"
}

var (
	seenSeed   = maphash.MakeSeed()
	seenTables = sync.Pool{New: func() any { return new([]uint64) }}
)
