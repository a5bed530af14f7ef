package redisdriver

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestTwice holds twice to the question it answers, whether a field comes
// twice in the batch, over batches from 0 to 3,000 fields (its table kept
// from a large batch to a small one and back), with the second of a pair
// anywhere after the first.
func TestTwice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 3, 16, 200, 3000, 5, 64, 1000, 2} {
		for range 20 {
			fields := make([]string, n)
			for i := range fields {
				fields[i] = "e" + strconv.Itoa(rng.IntN(1<<30))
			}
			want := "0"
			seen := map[string]bool{}
			for _, f := range fields {
				if seen[f] {
					want = "1"
				}
				seen[f] = true
			}
			if got := twice(n, func(k int) string { return fields[k] }); got != want {
				t.Fatalf("twice(%d distinct fields) = %s, want %s", n, got, want)
			}
			if n < 2 {
				continue
			}
			i := rng.IntN(n - 1)
			fields[i+1+rng.IntN(n-1-i)] = fields[i]
			if got := twice(n, func(k int) string { return fields[k] }); got != "1" {
				t.Fatalf("twice(%d fields, one twice) = %s, want 1", n, got)
			}
		}
	}
}
