// Package codec holds the batch helpers the lease store and the Redis
// driver share: grouping a batch by key, the common prefix of a chunk's
// tokens, many strings for one allocation. None of it is the driver
// contract (lease/driver): a driver of its own needs none of it.
package codec

// Group is the positions in a batch of the requests that share key, in order.
type Group[K comparable] struct {
	Key K
	Idx []int
}

// GroupBy splits a batch by key, in first-seen order. Each task's entities
// live in one hash, read and written by one script call per group. A batch
// of one key, a fan-out's usual, is one group made without a map, its
// keys compared, not hashed (docs/performance.md, item 16).
func GroupBy[K comparable](n int, key func(i int) K) []Group[K] {
	if n == 0 {
		return nil
	}
	first, same := key(0), 1
	for same < n && key(same) == first {
		same++
	}
	idx := make([]int, same, min(n, 2*same))
	for i := range idx {
		idx[i] = i
	}
	gs := []Group[K]{{Key: first, Idx: idx}}
	if same == n {
		return gs
	}
	at := map[K]int{first: 0}
	for i := same; i < n; i++ {
		k := key(i)
		j, ok := at[k]
		if !ok {
			j = len(gs)
			at[k] = j
			gs = append(gs, Group[K]{Key: k})
		}
		gs[j].Idx = append(gs[j].Idx, i)
	}
	return gs
}

// Strings converts buf to one string and returns its pieces ending at ends: many
// short strings for the price of one allocation.
func Strings(buf []byte, ends []int) []string {
	all, out := string(buf), make([]string, len(ends))
	start := 0
	for i, end := range ends {
		out[i], start = all[start:end], end
	}
	return out
}
