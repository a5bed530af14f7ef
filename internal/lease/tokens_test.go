package lease

import (
	"slices"
	"testing"

	"github.com/tickd/tickd/lease/driver"
)

// TestChunkTokens: the requests of a chunk get tokens that share a prefix,
// which chunkPrefix recovers and acquire.lua extends by position; requests
// outside a chunk, or rejected before sending (no req), are not in one, and
// tokens that are not a chunk's have no prefix.
func TestChunkTokens(t *testing.T) {
	reqs := []driver.Request{{Entity: "a"}, {Entity: "b", Chunk: "c1"}, {Entity: "c", Chunk: "c1"}, {Entity: "d", Chunk: "c1"}, {Entity: "e", Chunk: "c2"}, {Entity: "f", Chunk: "c3"}, {Entity: "g", Chunk: "c3"}}
	args := make([]driver.AcquireArg, len(reqs))
	for i := range reqs {
		args[i] = driver.AcquireArg{Req: &reqs[i]}
	}
	args[6].Req = nil // rejected: c3 is then a single request
	pos := chunkPositions(args)
	if want := []int{0, 1, 2, 3, 0, 0, 0}; !slices.Equal(pos, want) {
		t.Errorf("chunkPositions: %v, want %v", pos, want)
	}
	src := &tokenSource{nonce: "n"}
	got := src.tokens(len(args), pos)
	if want := []string{"n-1", "n-2.1", "n-2.2", "n-2.3", "n-5", "n-6", "n-7"}; !slices.Equal(got, want) {
		t.Errorf("tokens: %q, want %q", got, want)
	}
	if pos := chunkPositions(args[4:]); pos != nil {
		t.Errorf("chunkPositions of no chunk: %v, want nil", pos)
	}
}
