package redisdriver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// The chunk path (docs/performance.md, "Speed II"): a tick's chunk of up
// to maxChunk entities (acquire.lua's chunks) kept as one record of the
// task's hash, its entities' state in it until a per-entity script
// detaches one into its own value (lua/chunk.lua). A driver keeps records
// on a Redis of key layout 3 (CheckLayout). Acquire, renewal, release
// (grants.go), unlock, status and the console's pages, the sweep and a
// reshard know the records (TestChunkRecords*). A task with a run record
// (catch_up_runs = "all") goes entity by entity.

// maxChunk is the longest chunk sent as one: a record's masks are 32 bits,
// what Lua's bit library holds. A longer run of one Request.Chunk is sent
// entity by entity.
const maxChunk = 32

// The first byte of a chunk record's field and of an entity's index field
// in the task's hash. Neither is a byte driver.Escape leaves in an
// entity's field, so neither collides with one.
const (
	chunkMark = "#"
	indexMark = "@"
)

// chunkRecord is a chunk's record, the value of chunkMark + id in its
// task's hash: binary (chunk.lua reads and rewrites its numbers with
// Redis's struct library, without parsing text), big-endian,
//
//	held u32, ended i64, exp i64, odd u32, tick i64, fence i64, since i64
//
// (recordHead bytes), then Prefix '|' Holder (escaped). Each position (1
// to maxChunk, bit j-1 for position j) whose bit is not in Odd was granted
// by the record's last grant: Tick, Fence, Holder, Since (ms), under the
// token Prefix + j until Exp (ms) while its bit is in Held, else released
// done, the last release at Ended (ms). A position in Odd keeps its state
// in its own value.
type chunkRecord struct {
	Tick, Fence    int64
	Holder, Prefix string
	Exp            int64
	Held, Odd      uint32
	Since, Ended   int64
}

// recordHead is the length of a record's numbers, and chunkEntry of a
// chunk's entry in acquire.lua's CHUNKS (chunkArgs).
const (
	recordHead = 48
	chunkEntry = 5 + 2 + 32 + 32
)

// encode writes the record as the scripts store it.
func (c chunkRecord) encode() string {
	h := driver.Escape(c.Holder)
	b := make([]byte, 0, recordHead+len(c.Prefix)+1+len(h))
	b = binary.BigEndian.AppendUint32(b, c.Held)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Ended))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Exp))
	b = binary.BigEndian.AppendUint32(b, c.Odd)
	for _, n := range []int64{c.Tick, c.Fence, c.Since} {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, c.Prefix...)
	b = append(b, '|')
	return string(append(b, h...))
}

// decodeChunk reads a chunk record.
func decodeChunk(v string) (chunkRecord, error) {
	bad := fmt.Errorf("%w: chunk %q", errFormat, v)
	prefix, holder, ok := strings.Cut(v[min(len(v), recordHead):], "|")
	if len(v) <= recordHead || !ok {
		return chunkRecord{}, bad
	}
	b := []byte(v[:recordHead])
	i64 := func(at int) int64 { return int64(binary.BigEndian.Uint64(b[at:])) }
	c := chunkRecord{Held: binary.BigEndian.Uint32(b), Ended: i64(4), Exp: i64(12), Odd: binary.BigEndian.Uint32(b[20:]),
		Tick: i64(24), Fence: i64(32), Since: i64(40), Prefix: prefix}
	var err error
	if c.Holder, err = driver.Unescape(holder); err != nil {
		return chunkRecord{}, bad
	}
	return c, nil
}

// chunkIndex is an entity's index, the value of indexMark + its field:
// the chunk whose record holds it, and its position (1 to maxChunk).
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
	if !ok || id == "" || err != nil || p < 1 || p > maxChunk || pos != strconv.Itoa(p) {
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

// view is the entity at position pos of c as chunk.lua's detach writes it
// for an entity without a value of its own (a position c holds never has
// one): held under its grant's token while the grant holds it, else
// released done; false for a position whose value holds it (odd), or none.
func (c chunkRecord) view(pos int) (entityValue, bool) {
	bit := uint32(1) << (pos - 1)
	if pos < 1 || pos > maxChunk || c.Odd&bit != 0 {
		return entityValue{}, false
	}
	e := entityValue{LastTick: c.Tick, Fence: c.Fence}
	if c.Held&bit != 0 {
		e.Token, e.Exp, e.Touched, e.Reason, e.Tick, e.Holder = c.Prefix+strconv.Itoa(pos), c.Exp, c.Since, driver.ReasonTick, c.Tick, c.Holder
		return e, true
	}
	e.Touched = c.Ended
	e.Last = &runRecord{Outcome: driver.OutcomeDone, Start: c.Since, End: c.Ended, Fence: c.Fence, Reason: driver.ReasonTick, Replica: c.Holder}
	return e, true
}

// scanned is an entity of an HSCAN page of a task's hash and its value.
type scanned struct {
	entity string
	e      entityValue
}

// entitiesOf turns one HSCAN page of task's hash (kv: field, value, …)
// into its entities and their values, as status sees them: an entity its
// chunk's record holds by its index field (the page's records read with
// one HMGET), the others by their own values; records, the index fields
// of entities their own values hold, and values not understood are left
// out.
func (b *redisDriver) entitiesOf(ctx context.Context, task string, kv []string) ([]scanned, error) {
	out := make([]scanned, 0, len(kv)/2)
	var ids []string
	var xs map[int]chunkIndex
	for i := 0; i+1 < len(kv); i += 2 {
		if field, ok := strings.CutPrefix(kv[i], indexMark); ok {
			x, err := decodeIndex(kv[i+1])
			entity, uerr := driver.Unescape(field)
			if err != nil || uerr != nil {
				continue
			}
			if xs == nil {
				xs = map[int]chunkIndex{}
			}
			xs[len(out)] = x
			out = append(out, scanned{entity: entity})
			if !slices.Contains(ids, chunkMark+x.ID) { // a chunk's entities name one record
				ids = append(ids, chunkMark+x.ID)
			}
			continue
		}
		entity, err := driver.Unescape(kv[i])
		e, derr := decodeEntity(kv[i+1])
		if err == nil && derr == nil {
			out = append(out, scanned{entity, e})
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	vs, err := b.c.HMGet(ctx, b.k.entities(task), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("hmget %s: %w", b.k.entities(task), err)
	}
	recs := make(map[string]chunkRecord, len(ids))
	for k, v := range vs {
		if s, ok := v.(string); ok {
			if c, err := decodeChunk(s); err == nil {
				recs[ids[k][len(chunkMark):]] = c
			}
		}
	}
	kept := out[:0]
	for k, r := range out {
		if x, ok := xs[k]; ok {
			if r.e, ok = recs[x.ID].view(x.Position); !ok {
				continue // odd: its own value, in the walk, holds it
			}
		}
		kept = append(kept, r)
	}
	return kept, nil
}

// entityOf reads one entity's value as status sees it: from its chunk's
// record when the record holds it (index ix, "" for none), else v.
func (b *redisDriver) entityOf(ctx context.Context, task, v, ix string) (entityValue, error) {
	if x, err := decodeIndex(ix); err == nil {
		rv, err := b.c.HGet(ctx, b.k.entities(task), chunkMark+x.ID).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return entityValue{}, err
		}
		if c, err := decodeChunk(rv); err == nil {
			if e, ok := c.view(x.Position); ok {
				return e, nil
			}
		}
	}
	return decodeEntity(v)
}

// detachAllArgs are detachall.lua's: an entity's field, repeated.
var detachAllArgs = argv{each: []arg{{"FIELD", 0}}}

var scriptDetachAll = newScript("detachall", detachAllArgs, "chunk")

// detachAll detaches every entity of hash key (a task shard's) from its
// chunk's record into its own value, and deletes the records: what a
// reshard moves is values only. A reshard refuses the task's grants
// meanwhile, so no record is made while it runs.
func (b *redisDriver) detachAll(ctx context.Context, key string) error {
	for _, mark := range []string{indexMark, chunkMark} {
		var cursor uint64
		for {
			kv, next, err := b.c.HScan(ctx, key, cursor, mark+"*", pageSize).Result()
			if err != nil {
				return fmt.Errorf("hscan %s: %w", key, err)
			}
			var fields []any
			for i := 0; i < len(kv); i += 2 {
				if mark == indexMark {
					fields = append(fields, kv[i][len(indexMark):])
				} else {
					fields = append(fields, kv[i])
				}
			}
			switch {
			case len(fields) == 0:
			case mark == indexMark:
				err = scriptDetachAll().Run(ctx, b.c, []string{key}, fields...).Err()
			default: // every entity of theirs is detached: the records go
				err = b.c.HDel(ctx, key, anyStrings(fields)...).Err()
			}
			if err != nil {
				return fmt.Errorf("detach %s: %w", key, err)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// anyStrings is vs, each a string, as strings.
func anyStrings(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.(string)
	}
	return out
}
