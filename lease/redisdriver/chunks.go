package redisdriver

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
)

// The chunk path (docs/performance.md, "Speed II"): a tick's chunk of 16
// entities (acquire.lua's chunks) kept as one record of the task's hash,
// its entities' state in it until a per-entity script detaches one into
// its own value (lua/chunk.lua). Being built: a driver keeps records only
// with its records flag, which nothing outside this package's tests sets
// yet: acquire, renewal and release know the records (TestChunkRecords*);
// unlock, status, the console's reads, the sweep and a reshard do not.

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

// grantrelease.lua's and grantrenew.lua's arguments: the shard count and
// the TTL (renewal only), then per grant a field of one of its entities,
// its token prefix and the mask of the positions asked about.
const (
	grShards = iota
	grTTL
	grFixed
)

const (
	grField = iota
	grPrefix
	grMask
	grStride
)

var grantArgs = argv{fixed: []arg{{"SHARDS", grShards}, {"TTL", grTTL}},
	each: []arg{{"FIELD", grField}, {"PREFIX", grPrefix}, {"MASK", grMask}}}

var (
	scriptGrantRelease = newScript("grantrelease", grantArgs, "chunk")
	scriptGrantRenew   = newScript("grantrenew", grantArgs, "chunk")
)

// grantOf cuts a lease's token into its chunk grant's prefix (through the
// '.') and its position (1 to 16); false for a token of no chunk
// (driver.AcquireArg.Token: only a chunk's hold a '.').
func grantOf(token string) (prefix string, pos int, ok bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", 0, false
	}
	p, err := strconv.Atoi(token[i+1:])
	if err != nil || p < 1 || p > 16 {
		return "", 0, false
	}
	return token[:i+1], p, true
}

// grantCall is what one call of a grant script sends: a task's shard,
// named by a count, and a TTL.
type grantCall struct {
	task   string
	shards int
	ttl    time.Duration
}

// aGrant is one chunk grant's leases asked about: a field of one of them,
// the mask of their positions, and each lease's index and position.
type aGrant struct {
	call   grantCall
	prefix string
	field  *string
	mask   uint16
	leases [][2]int
}

// byGrant asks sc (grantrelease or grantrenew) about the leases ls(i), i
// < n, of chunk grants that want(i), one triple a grant, one call a task,
// each lease with ttl(i) (0 for a release), and answers which it did
// (nil when none was asked about). A call that fails leaves its leases
// undone, and is the error.
func (b *redisDriver) byGrant(ctx context.Context, sc *redis.Script, n int, ls func(i int) *driver.Lease, want func(i int) bool,
	ttl func(i int) time.Duration, ackWithin time.Duration) ([]bool, error) {
	var grants []aGrant
	at := map[[2]string]int{}
	for i := range n {
		l := ls(i)
		prefix, pos, ok := grantOf(l.Token)
		if !ok || !want(i) {
			continue
		}
		c := grantCall{l.Task, l.Shards, ttl(i)}
		key := [2]string{prefix, l.Task}
		g, seen := at[key]
		if !seen || grants[g].call != c {
			g = len(grants)
			at[key] = g
			grants = append(grants, aGrant{call: c, prefix: prefix, field: &l.Entity})
		}
		grants[g].mask |= 1 << (pos - 1)
		grants[g].leases = append(grants[g].leases, [2]int{i, pos})
	}
	if len(grants) == 0 {
		return nil, nil
	}
	gs := codec.GroupBy(len(grants), func(g int) grantCall { return grants[g].call })
	calls := make([]scriptCall, len(gs))
	for c, gr := range gs {
		args := make([]any, grFixed, grFixed+grStride*len(gr.Idx))
		args[grShards], args[grTTL] = shardsArg(gr.Key.shards), ms(gr.Key.ttl)
		for _, g := range gr.Idx {
			var part [grStride]any
			part[grField], part[grPrefix], part[grMask] = fieldArg(grants[g].field), grants[g].prefix, int64(grants[g].mask)
			args = append(args, part[:]...)
		}
		calls[c] = scriptCall{keys: []string{b.k.entities(gr.Key.task), b.k.shards(gr.Key.task)}, args: args}
	}
	res, errs, err := b.runEach(ctx, sc, calls, ackWithin)
	if res == nil {
		return nil, shardsErr(err)
	}
	done := make([]bool, n)
	for c, gr := range gs {
		if errs != nil && errs[c] != nil {
			err = cmp.Or(err, shardsErr(errs[c]))
			continue
		}
		if len(res[c]) != len(gr.Idx) {
			return nil, fmt.Errorf("lease: script reply has %d entries for %d grants", len(res[c]), len(gr.Idx))
		}
		for k, g := range gr.Idx {
			mask, perr := strconv.ParseUint(res[c][k], 10, 16)
			if perr != nil {
				return nil, fmt.Errorf("%w: grant reply %q", errFormat, res[c][k])
			}
			for _, l := range grants[g].leases {
				done[l[0]] = mask&(1<<(l[1]-1)) != 0
			}
		}
	}
	return done, err
}

// Release releases the leases of chunk grants whose runs ended done with
// nothing asked for after by their grants (grantrelease.lua), when the
// driver keeps records, and the others, and those, by their own values.
func (b *redisDriver) Release(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	if !b.records {
		return b.releaseEach(ctx, rs)
	}
	done, _ := b.byGrant(ctx, scriptGrantRelease(), len(rs), func(i int) *driver.Lease { return rs[i].Lease }, func(i int) bool {
		return rs[i].Finished.Outcome == driver.OutcomeDone && rs[i].Next == nil && len(rs[i].Lease.Requests) == 0
	}, func(int) time.Duration { return 0 }, 0)
	if undone(done, len(rs)) == len(rs) {
		return b.releaseEach(ctx, rs)
	}
	out := make([]driver.ReleaseReply, len(rs))
	if err := eachLeft(done, rs, out, func(sub []driver.ReleaseArg) ([]driver.ReleaseReply, error) { return b.releaseEach(ctx, sub) }); err != nil {
		return nil, err
	}
	return out, nil
}

// Renew renews the leases of chunk grants by their grants
// (grantrenew.lua), when the driver keeps records, and the others, and
// those, by their own values. A round fails whole.
func (b *redisDriver) Renew(ctx context.Context, ls []*driver.Lease) ([]driver.Renewal, error) {
	if !b.records {
		return b.renewEach(ctx, ls)
	}
	shortest := ls[0].TTL
	for _, l := range ls {
		shortest = min(shortest, l.TTL)
	}
	done, err := b.byGrant(ctx, scriptGrantRenew(), len(ls), func(i int) *driver.Lease { return ls[i] }, func(int) bool { return true },
		func(i int) time.Duration { return ls[i].TTL }, ackWait(shortest))
	if err != nil {
		return nil, err
	}
	out := make([]driver.Renewal, len(ls))
	for i := range out {
		out[i] = driver.RenewOK
	}
	if err := eachLeft(done, ls, out, func(sub []*driver.Lease) ([]driver.Renewal, error) { return b.renewEach(ctx, sub) }); err != nil {
		return nil, err
	}
	return out, nil
}

// undone counts the indexes below n that done (nil: none) does not mark.
func undone(done []bool, n int) int {
	k := 0
	for i := range n {
		if done == nil || !done[i] {
			k++
		}
	}
	return k
}

// eachLeft puts in out, for the items of all that done (nil: none) does
// not mark, what f answers for them, all in one call (none when every
// item is done).
func eachLeft[A, R any](done []bool, all []A, out []R, f func([]A) ([]R, error)) error {
	var sub []A
	var at []int
	for i := range all {
		if done == nil || !done[i] {
			sub, at = append(sub, all[i]), append(at, i)
		}
	}
	if len(sub) == 0 {
		return nil
	}
	got, err := f(sub)
	if err != nil {
		return err
	}
	for k, i := range at {
		out[i] = got[k]
	}
	return nil
}
