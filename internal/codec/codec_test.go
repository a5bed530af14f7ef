package codec

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// groupsOf is what GroupBy must answer, found the slow way: each key in
// first-seen order, then every position that holds it.
func groupsOf(keys []string) []Group[string] {
	var gs []Group[string]
	for i, k := range keys {
		if slices.Index(keys, k) < i {
			continue // not its first position: its group is made
		}
		g := Group[string]{Key: k}
		for j := i; j < len(keys); j++ {
			if keys[j] == k {
				g.Idx = append(g.Idx, j)
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// TestGroupBy holds GroupBy to groupsOf over batches of one key, of a
// run of one key then others, and of keys mixed, first-seen order included.
func TestGroupBy(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][]string{nil, {"a"}, {"a", "a", "a"}, {"a", "b"}, {"a", "a", "b", "a", "c", "b"}, {"b", "a", "a"}}
	for range 200 {
		n, kinds := rng.IntN(40), 1+rng.IntN(4)
		keys := make([]string, n)
		run := rng.IntN(n + 1) // a first run of one key, as a fan-out's batch starts
		for i := range keys {
			keys[i] = "k0"
			if i >= run {
				keys[i] = "k" + string(rune('0'+rng.IntN(kinds)))
			}
		}
		cases = append(cases, keys)
	}
	for _, keys := range cases {
		key := func(i int) string { return keys[i] }
		got, want := GroupBy(len(keys), key), groupsOf(keys)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("GroupBy(%q) = %v, want %v", keys, got, want)
		}
	}
}
