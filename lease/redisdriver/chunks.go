package redisdriver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// The chunk path (docs/performance.md, "Speed II"): a tick's chunk of 16
// entities (acquire.lua's chunks) kept as one record of the task's hash,
// its entities' state in it until a per-entity script detaches one into
// its own value (lua/chunk.lua). Being built: the record, the index and
// the detach step are here and tested (TestChunkCodecsAgree, TestDetach);
// no script of the store's writes a record yet.

// The first byte of a chunk record's field and of an entity's index field
// in the task's hash. Neither is a byte driver.Escape leaves in an
// entity's field, so neither collides with one.
const (
	chunkMark = "#"
	indexMark = "@"
)

// chunkRecord is a chunk's record, the value of chunkMark + id in its
// task's hash:
//
//	tick|fence|holder|prefix|exp|held|odd|since|ended
//
// Each position (1 to 16, bit j-1 for position j) whose bit is not in Odd
// was granted by the record's last grant: Tick, Fence, Holder (stored
// escaped), Since (ms), under the token Prefix + j until Exp (ms) while
// its bit is in Held, else released done, the last release at Ended (ms).
// A position in Odd keeps its state in its own value.
type chunkRecord struct {
	Tick, Fence    int64
	Holder, Prefix string
	Exp            int64
	Held, Odd      uint16
	Since, Ended   int64
}

// encode writes the record as the scripts store it.
func (c chunkRecord) encode() string {
	return strings.Join([]string{strconv.FormatInt(c.Tick, 10), strconv.FormatInt(c.Fence, 10), driver.Escape(c.Holder), c.Prefix,
		strconv.FormatInt(c.Exp, 10), strconv.FormatUint(uint64(c.Held), 10), strconv.FormatUint(uint64(c.Odd), 10),
		strconv.FormatInt(c.Since, 10), strconv.FormatInt(c.Ended, 10)}, "|")
}

// decodeChunk reads a chunk record.
func decodeChunk(v string) (chunkRecord, error) {
	f := strings.Split(v, "|")
	bad := fmt.Errorf("%w: chunk %q", errFormat, v)
	if len(f) != 9 {
		return chunkRecord{}, bad
	}
	c := chunkRecord{Prefix: f[3]}
	var err error
	if c.Holder, err = driver.Unescape(f[2]); err != nil {
		return chunkRecord{}, bad
	}
	for _, n := range []struct {
		dst *int64
		s   string
	}{{&c.Tick, f[0]}, {&c.Fence, f[1]}, {&c.Exp, f[4]}, {&c.Since, f[7]}, {&c.Ended, f[8]}} {
		if *n.dst, err = number(n.s); err != nil {
			return chunkRecord{}, bad
		}
	}
	for _, n := range []struct {
		dst *uint16
		s   string
	}{{&c.Held, f[5]}, {&c.Odd, f[6]}} {
		u, err := strconv.ParseUint(n.s, 10, 16)
		if err != nil || n.s != strconv.FormatUint(u, 10) {
			return chunkRecord{}, bad
		}
		*n.dst = uint16(u)
	}
	return c, nil
}

// chunkIndex is an entity's index, the value of indexMark + its field:
// the chunk whose record holds it, and its position (1 to 16).
//
//	id:position
type chunkIndex struct {
	ID       string
	Position int
}

func (x chunkIndex) encode() string { return x.ID + ":" + strconv.Itoa(x.Position) }

func decodeIndex(v string) (chunkIndex, error) {
	id, pos, ok := strings.Cut(v, ":")
	p, err := strconv.Atoi(pos)
	if !ok || id == "" || err != nil || p < 1 || p > 16 || pos != strconv.Itoa(p) {
		return chunkIndex{}, fmt.Errorf("%w: chunk index %q", errFormat, v)
	}
	return chunkIndex{id, p}, nil
}

// recordsArg is acquire.lua's RECORDS.
func recordsArg(on bool) string {
	if on {
		return "1"
	}
	return "0"
}
