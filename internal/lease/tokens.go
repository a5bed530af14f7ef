package lease

import (
	"strconv"
	"sync/atomic"

	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
)

// tokenSource makes a store's tokens: its nonce, which changes at every
// start, and a sequence number.
type tokenSource struct {
	nonce string
	seq   atomic.Uint64
}

// token returns a new token, "nonce-seq": a take's claim.
func (t *tokenSource) token() string { return t.tokens(1, nil)[0] }

// tokens returns n new lease tokens, cut from one allocation. Each is
// "nonce-seq". pos, when not nil, places the i-th in a chunk
// (chunkPositions): the j-th of a chunk (from 1) is the chunk's first
// token with ".j" after it (driver.AcquireArg.Token), so that a driver can
// send a chunk's tokens as their prefix alone.
func (t *tokenSource) tokens(n int, pos []int) []string {
	last := t.seq.Add(uint64(n))
	buf := make([]byte, 0, n*(len(t.nonce)+14))
	ends := make([]int, n)
	var from, to int // the current chunk's "nonce-seq" in buf
	for i := range n {
		j := 0
		if pos != nil {
			j = pos[i]
		}
		if j <= 1 {
			from = len(buf)
			buf = append(buf, t.nonce...)
			buf = strconv.AppendUint(append(buf, '-'), last-uint64(n-1-i), 36)
			to = len(buf)
		} else {
			buf = append(buf, buf[from:to]...)
		}
		if j > 0 {
			buf = strconv.AppendInt(append(buf, '.'), int64(j), 10)
		}
		ends[i] = len(buf)
	}
	return codec.Strings(buf, ends)
}

// chunkPositions places each request of args in its chunk: 1, 2, … along a
// run of two or more requests with one Request.Chunk (among those sent,
// with a req), 0 for the others; nil when no request is in one.
func chunkPositions(args []driver.AcquireArg) []int {
	var pos []int
	for i := 0; i < len(args); {
		if args[i].Req == nil || args[i].Req.Chunk == "" {
			i++
			continue
		}
		c, j := args[i].Req.Chunk, i+1
		for j < len(args) && args[j].Req != nil && args[j].Req.Chunk == c {
			j++
		}
		if j-i >= 2 {
			if pos == nil {
				pos = make([]int, len(args))
			}
			for k := i; k < j; k++ {
				pos[k] = k - i + 1
			}
		}
		i = j
	}
	return pos
}
