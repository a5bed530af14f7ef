package redisdriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
)

// Renewal and release by grant: the leases of a chunk's grant (chunks.go)
// asked about one triple a grant.

// grantrelease.lua's and grantrenew.lua's arguments: the shard count and
// the TTL (renewal only), then per grant its record's field (chunkMark and
// its id) or a field of one of its entities, its token prefix and the mask
// of the positions asked about.
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
// '.') and its position (1 to maxChunk); false for a token of no chunk
// (driver.AcquireArg.Token: only a chunk's hold a '.').
func grantOf(token string) (prefix string, pos int, ok bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", 0, false
	}
	p, err := strconv.Atoi(token[i+1:])
	if err != nil || p < 1 || p > maxChunk {
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

// grantRecords remembers the record of the chunk grants a driver made
// lately (token prefix → the record's field), so that their renewals and
// releases name it rather than one of its entities, whose index the
// script would read first. Two generations of at most grantRecordsMax
// each bound it: a grant older than that (or made by another process)
// is named by an entity, as before.
type grantRecords struct {
	mu       sync.Mutex
	cur, old map[string]string
}

const grantRecordsMax = 4096

func (g *grantRecords) put(prefix, rid string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.cur) >= grantRecordsMax || g.cur == nil {
		g.old, g.cur = g.cur, make(map[string]string, grantRecordsMax)
	}
	g.cur[prefix] = chunkMark + rid
}

// field is the record field of prefix's grant, or entity's field when
// this driver does not know it.
func (g *grantRecords) field(prefix string, entity *string) any {
	g.mu.Lock()
	f, ok := g.cur[prefix]
	if !ok {
		f, ok = g.old[prefix]
	}
	g.mu.Unlock()
	if ok {
		return f
	}
	return fieldArg(entity)
}

// aGrant is one chunk grant's leases asked about: a field of one of them,
// the mask of their positions, and each lease's index and position.
type aGrant struct {
	call   grantCall
	prefix string
	field  *string
	mask   uint32
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
			part[grField], part[grPrefix], part[grMask] = b.grantRecs.field(grants[g].prefix, grants[g].field), grants[g].prefix, int64(grants[g].mask)
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
			mask, perr := strconv.ParseUint(res[c][k], 10, maxChunk)
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
	if !b.records.Load() {
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
	if !b.records.Load() {
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

// releaseRecords is release.lua's RECORDS for the leases of rs at idx:
// "1" when records are kept and one of them is a chunk grant's (its token
// P.j), since only such a lease's entity may be in a record.
func (b *redisDriver) releaseRecords(rs []driver.ReleaseArg, idx []int) string {
	return recordsArg(b.records.Load() && slices.ContainsFunc(idx, func(j int) bool { return strings.IndexByte(rs[j].Lease.Token, '.') >= 0 }))
}
