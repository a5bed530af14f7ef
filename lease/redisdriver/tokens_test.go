package redisdriver

import (
	"slices"
	"testing"
)

// TestChunkTokens: a chunk's tokens (P.1, P.2, …) go as their prefix P.
// alone, and any others are not taken for a chunk's; each token sent whole
// goes between its separators.
func TestChunkTokens(t *testing.T) {
	tok := func(ts ...string) func(int) string { return func(k int) string { return ts[k] } }
	if p, ok := chunkPrefix(tok("n-2.1", "n-2.2", "n-2.3"), 3); !ok || p != "n-2." {
		t.Errorf("chunkPrefix: %q, %v; want %q", p, ok, "n-2.")
	}
	for _, ts := range [][]string{{"n-1.1", "n-1.3"}, {"n-1", "n-1.2"}, {"n-1.1", "n-2.2"}, {"n-1.1", "n-1."}, {"n-1.1", "n-1.20"}} {
		if p, ok := chunkPrefix(tok(ts...), len(ts)); ok {
			t.Errorf("chunkPrefix(%q) = %q: want none", ts, p)
		}
	}
	if got, want := barred(2, tok("n-1", "n-2.1")), []string{"|n-1|", "|n-2.1|"}; !slices.Equal(got, want) {
		t.Errorf("barred: %q, want %q", got, want)
	}
}
