package scheduler

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// A tick's entity stream, in a fan-out in source order, is cut into
// chunks: a batch that holds a whole chunk sends it as one, which only one
// replica takes (docs/performance.md).

// jumpEntities is how far a fan-out skips ahead (in whole chunks) when
// another replica took a whole batch: the replicas of a tick read the same
// stream from its start, so without it the ones that lost the race for a
// batch lose it for the next, and the next (docs/performance.md).
const jumpEntities = 8 * driver.BatchSize

// chunkFor is the length of a chunk of a tick's entity stream for a task
// of concurrency run slots. Batches are as large as the free slots, so a
// chunk must be small enough to fall whole inside most of them; each costs
// the acquire script one claim and one record, and the release one
// record, whatever its length: a task of bigChunkConcurrency slots or more
// has chunks of bigChunk, the store's longest (its record's masks are 32
// bits), others of chunkSize. Replicas whose configs disagree name other
// chunks: each entity is still run once a tick (a record whose entity
// another one took answers it entity by entity), only dearer.
func chunkFor(concurrency int) int {
	if concurrency >= bigChunkConcurrency {
		return bigChunk
	}
	return chunkSize
}

const (
	chunkSize           = 16
	bigChunk            = 32
	bigChunkConcurrency = 128
)

// takenWhole says whether another replica took the batch's chunks (it held
// one at least) and ran the rest.
func takenWhole(reqs []driver.Request, res []lease.Result) bool {
	chunk := false
	for i, r := range res {
		if !errors.Is(r.Err, lease.ErrAlreadyRan) {
			return false
		}
		chunk = chunk || reqs[i].Chunk != ""
	}
	return chunk
}

// markChunks names each whole chunk in the batch by its ids, each with its
// length (the store sends a hash of the name): replicas that read the same
// ids in the same order name it alike.
func (f *fanOut) markChunks(reqs []driver.Request) {
	first, end := f.first, f.first+len(reqs) // the stream positions of reqs
	n := f.chunk
	for k := (first + n - 1) / n; (k+1)*n <= end; k++ {
		lo := k*n - first
		id := chunkName(f.batch[lo : lo+n])
		for i := lo; i < lo+n; i++ {
			reqs[i].Chunk = id
		}
	}
}

// ChunkOf names, for each of ids (a whole tick's entity stream in source
// order, of a task of one shard and concurrency run slots), the chunk a
// fan-out sends it in: Request.Chunk as the fan-out sets it ("" for the
// tail not a whole chunk). It is for a benchmark's holder, which takes a
// tick's leases as another replica's fan-out would.
func ChunkOf(ids []string, concurrency int) []string {
	n := chunkFor(concurrency)
	names := make([]string, len(ids))
	for lo := 0; lo+n <= len(ids); lo += n {
		name := chunkName(ids[lo : lo+n])
		for i := lo; i < lo+n; i++ {
			names[i] = name
		}
	}
	return names
}

// chunkName names a chunk by its ids, in one allocation.
func chunkName(ids []string) string {
	n := 0
	for _, id := range ids {
		n += len(id) + 21 // the length's digits, at most 20, and ':'
	}
	var b strings.Builder
	b.Grow(n)
	var num [20]byte
	for _, id := range ids {
		b.Write(strconv.AppendInt(num[:0], int64(len(id)), 10))
		b.WriteByte(':')
		b.WriteString(id)
	}
	return b.String()
}

// tailWait bounds how long the partial chunk at a batch's end (flushWhole)
// waits for a run slot before it is sent alone.
const tailWait = 10 * time.Millisecond

// flushWhole flushes the batch but for the part of a chunk at its end, if
// it ends inside a chunk and holds more than that part: a chunk cut between
// two batches is sent entity by entity, so every replica reads its
// entities' records (docs/performance.md). It answers whether it flushed; the
// part kept stays in the batch, or is skipped when the batch was taken
// whole.
func (f *fanOut) flushWhole() bool {
	end := f.first + len(f.batch)
	if f.chunk == 0 {
		return false
	}
	cut := end/f.chunk*f.chunk - f.first
	if cut <= 0 || cut >= len(f.batch) {
		return false
	}
	tail := slices.Clone(f.batch[cut:])
	f.batch = f.batch[:cut]
	f.flush()
	f.first = end - len(tail)
	if f.ahead.jump > 0 {
		for i, id := range tail {
			f.skipReserved(id, f.first+i)
		}
		return true
	}
	f.batch = append(f.batch, tail...)
	return true
}
