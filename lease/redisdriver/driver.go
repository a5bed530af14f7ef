package redisdriver

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/tickdtype"
)

// RedisClient is what the store needs of a go-redis client.
type RedisClient interface {
	redis.Scripter
	redis.Cmdable
}

// redisDriver is the Redis driver: each operation one Lua script call (or a
// batch of them), over the key layout of keys.go.
type redisDriver struct {
	c        RedisClient
	k        keys
	cfg      driver.Config
	acksMode driver.ReplicaAcks // Options.ReplicaAcks
	acks     *acker             // nil: never wait for replicas
	gate     layoutGate
	succ     successors // the replicas recorded in each server's epochs
	// shardAcks holds an acker per Cluster master, by address.
	shardAcks sync.Map
	// own marks the buckets of the tasks this replica last announced; polls
	// counts take's polls.
	own   atomic.Pointer[[]bool]
	polls atomic.Uint64
	// share is how the replicas that run this one's tasks share the due
	// polls (nil: not yet announced); found says the last poll found an
	// entry due.
	share atomic.Pointer[pollShare]
	found atomic.Bool
	// wakes says the driver hears add_due's wake-ups (WatchRevocations
	// subscribed to them); only then does a due poll that found nothing due
	// wait until nextLook (unix ns: the earliest entry of its buckets, at
	// most dueIdle) before it looks again (due.go); wakeups counts the
	// wake-ups heard, so that a look under way knows one came.
	wakes    atomic.Bool
	nextLook atomic.Int64
	wakeups  atomic.Uint64
	dueIdle  time.Duration // 0: dueIdle
	// announced is when this store last announced its tasks (Redis ms).
	announced atomic.Int64
	// seen is, per bucket, the highest fence this driver was granted and
	// trusted: data that forgot it was rolled back (lib.lua's quarantine).
	seen [buckets]atomic.Int64
	// records keeps a tick's chunks as records (chunks.go): on a Redis of
	// this layout (LayoutVersion), not on one of layoutNoRecords, which a
	// tickd that does not read records may share (CheckLayout sets it).
	records atomic.Bool
	// grantRecs names the record of each chunk grant this driver made
	// lately, so that a renewal or release sends it (grants.go).
	grantRecs grantRecords
}

// New returns a driver that keeps a store's state in Redis under prefix,
// waiting for acks replicas to acknowledge each lease write. Stores on
// drivers that share the Redis and the prefix coordinate. The client is
// the caller's.
func New(c RedisClient, prefix string, acks tickdtype.ReplicaAcks) (driver.Driver, error) {
	if !driver.ValidPrefix(prefix) {
		return nil, fmt.Errorf("lease: key prefix %q: use letters, digits and . _ - : only", prefix)
	}
	b := &redisDriver{c: c, k: keys{prefix: prefix}, acksMode: acks}
	if acks != driver.AcksNever {
		b.acks = &acker{mode: acks}
	}
	return b, nil
}

// Client is the driver's Redis client (the caller's).
func (b *redisDriver) Client() RedisClient { return b.c }

// maxTTL is the store's longest lease TTL: the quarantine of a bucket
// found without an epoch.
func (b *redisDriver) maxTTL() time.Duration { return b.cfg.MaxTTL() }

// Configure keeps the store's settings.
func (b *redisDriver) Configure(cfg driver.Config) { b.cfg = cfg }

// pageSize is how many keys, fields or due entries one SCAN, HSCAN, sweep
// or ZRANGE page reads (status and the sweep walk everything a page at a
// time).
const pageSize = 1000

func (b *redisDriver) Acquire(ctx context.Context, reqs []driver.AcquireArg) ([]driver.AcquireReply, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	out := make([]driver.AcquireReply, len(reqs))
	var live []int // requests to send: the others were rejected before
	for i, a := range reqs {
		if a.Token != "" {
			live = append(live, i)
		}
	}
	gs := groupAcquires(reqs, live)
	holderArg, maxTTL := driver.Escape(b.cfg.Replica), b.maxTTL()
	calls := make([]scriptCall, len(gs))
	for g, gr := range gs {
		k := gr.Key
		args := make([]any, acqFixed, acqFixed+acqStride*len(gr.Idx))
		args[acqMaxTTL], args[acqHolder], args[acqPrefix] = ms(maxTTL), holderArg, driver.Escape(k.task)+":"
		args[acqTTL], args[acqReason], args[acqTick], args[acqQueue] = ms(k.ttl), k.reason, k.tick, k.busy
		args[acqChannel], args[acqQueueAge], args[acqRecord], args[acqFanned] = "", ms(k.queueAge), ms(k.record), 0
		if k.busy == busyReplace {
			args[acqChannel] = b.k.revoked()
		}
		args[acqShards], args[acqFloor] = shardsArg(k.shards), k.floor
		args[acqTwice] = twice(len(gr.Idx), func(x int) string { return reqs[live[gr.Idx[x]]].Req.Entity })
		bk := bucketOf(k.task)
		args[acqSeen], args[acqRecords] = b.seen[bk].Load(), recordsArg(b.records.Load())
		ks := []string{b.k.epoch(bk), b.k.due(bk), b.k.dueInfo(bk), b.k.entities(k.task), b.k.followups(k.task)}
		var chunks strings.Builder
		var bars []string // the tokens not sent in a chunk, barred: made at the first
		for x := 0; x < len(gr.Idx); {
			if y, ok := b.chunkArgs(&args, &chunks, reqs, live, gr.Idx, x); ok {
				x = y
				continue
			}
			a := &reqs[live[gr.Idx[x]]] // pointers: go-redis boxes a string with an allocation
			var from any = ""
			if d := a.Req.From; d != nil {
				from = dueFrom{Claim: d.Claim, Tick: unixMS(d.Tick), Reqs: d.Requests}.encode()
				ks = b.requestKeys(ks, k.task, d.Requests)
			}
			if bars == nil {
				bars = barred(len(gr.Idx), func(k int) string { return reqs[live[gr.Idx[k]]].Token })
			}
			var part [acqStride]any
			part[acqField], part[acqToken], part[acqFrom] = fieldArg(&a.Req.Entity), &bars[x], from
			args = append(args, part[:]...)
			x++
		}
		args[acqChunks] = chunks.String()
		if chunks.Len() > 0 {
			ks = slices.Insert(ks, 5, b.k.claims(k.task, k.tick))
		}
		if k.record > 0 { // the run record: the entities' numbers and the tick's bitmap
			ks = append(ks, b.k.entityNumbers(k.task), b.k.entityCount(k.task), b.k.ran(k.task, k.tick))
			if k.recordOf != "" { // a record of its own decides, before the tick's (set too); a negative record says so
				ks = slices.Insert(ks, len(ks)-1, b.k.ranOf(k.task, k.tick, k.recordOf))
				args[acqRecord] = "-" + ms(k.record)
			}
		}
		if k.reason == string(driver.ReasonTick) && k.tick != "0" { // a tick fanned out: its mark
			args[acqFanned] = ms(driver.FannedKept)
			ks = append(ks, b.k.fanned(k.task, k.tick))
		}
		calls[g] = scriptCall{keys: append(ks, b.k.shards(k.task)), args: args}
	}
	var shortest time.Duration
	for _, g := range gs {
		if shortest == 0 || g.Key.ttl < shortest {
			shortest = g.Key.ttl
		}
	}
	res, errs, err := runGroups(ctx, b, scriptAcquire(), gs, calls, len(live), ackWait(shortest))
	if res == nil {
		return nil, shardsErr(err)
	}
	if derr := decodeAcquireReplies(out, live, res, errs); derr != nil {
		return nil, derr
	}
	b.noteGrants(gs, out, live, err)
	b.spreadLoss(ctx, gs, res)
	return out, err // an *AckError: the grants stand on the primary, untrusted
}

// acquireKey is what a fan-out batch's requests share, sent once: task,
// TTL, reason, tick, floor and queue; per entity only its field, token and
// due entry.
type acquireKey struct {
	task, reason, tick, floor string
	ttl                       time.Duration
	busy                      string // what a busy entity gets: busySkip, busyQueue (or a buffer's size), busyReplace
	queueAge                  time.Duration
	record                    time.Duration
	recordOf                  string // Request.RecordOf
	shards                    int
}

// groupAcquires groups the requests reqs[live[i]] by what they share. A
// fan-out batch's share their tick and floor: each is formatted once.
func groupAcquires(reqs []driver.AcquireArg, live []int) []codec.Group[acquireKey] {
	var lastTick, lastFloor time.Time
	lastTickS, lastFloorS := "", ""
	return codec.GroupBy(len(live), func(i int) acquireKey {
		r := reqs[live[i]].Req
		k := acquireKey{task: r.Task, reason: string(r.Reason), tick: "0", floor: "0", ttl: r.TTL, busy: busyArg(r), queueAge: r.QueueAge, record: r.Record, recordOf: r.RecordOf, shards: reqs[live[i]].Shards}
		if r.Reason != driver.ReasonTick && !driver.ByRecord(r.Reason) {
			return k
		}
		if lastTickS == "" || !r.Tick.Equal(lastTick) {
			lastTick, lastTickS = r.Tick, tickMS(r.Tick)
		}
		k.tick = lastTickS
		if floor := r.TickFloor(); !floor.Equal(r.Tick) {
			if lastFloorS == "" || !floor.Equal(lastFloor) {
				lastFloor, lastFloorS = floor, tickMS(floor)
			}
			k.floor = lastFloorS
		}
		return k
	})
}

// decodeAcquireReplies puts the answer res[j] (or the error errs[j]) of
// request live[j] in out.
func decodeAcquireReplies(out []driver.AcquireReply, live []int, res []string, errs []error) error {
	for j, v := range res {
		if errs != nil && errs[j] != nil {
			out[live[j]].Err = shardsErr(errs[j])
			continue
		}
		var err error
		if out[live[j]], err = decodeAcquireReply(v); err != nil {
			return err
		}
	}
	return nil
}

// claimsTTL is how long a tick's taken chunks (Request.Chunk) are kept
// after the last one was taken: longer than replicas' fan-outs of one tick
// drift apart. A fan-out later than that reads each of its entities again,
// which is correct, only dearer.
const claimsTTL = 2 * time.Minute

// chunkArgs sends the chunk (Request.Chunk) that starts at a group's x-th
// request, if one does, as one triple of acquire.lua's arguments: its
// fields space-joined, its tokens' prefix (Store.tokens), and "" for its due
// entry; chunks gets an entry of chunkEntry bytes: the triple's position
// among the triples (5 digits), the chunk's length (2), a hash of its id
// (its claim) and a hash of its fields (its record: a record's j-th
// position is always the same entity, whatever part of a chunk a caller
// sends under its name), 32 hex digits each, so that the script cuts it
// by position. It answers the position after the chunk, or false for a
// request in no chunk (or one whose tokens are not a chunk's, or past the
// 99,999th triple), which is sent alone.
func (b *redisDriver) chunkArgs(args *[]any, chunks *strings.Builder, reqs []driver.AcquireArg, live, idx []int, x int) (int, bool) {
	at := func(k int) *driver.AcquireArg { return &reqs[live[idx[x+k]]] }
	c := at(0).Req.Chunk
	if c == "" {
		return x, false
	}
	m := 1
	for x+m < len(idx) && at(m).Req.Chunk == c {
		m++
	}
	if m < 2 || m > maxChunk {
		return x, false
	}
	prefix, ok := chunkPrefix(func(k int) string { return at(k).Token }, m)
	if !ok {
		return x, false
	}
	var fields strings.Builder
	for k := range m {
		if at(k).Req.Entity == "" {
			return x, false // the script splits a chunk's fields at spaces, skipping empty ones
		}
		if k > 0 {
			fields.WriteByte(' ')
		}
		fields.WriteString(driver.Escape(at(k).Req.Entity))
	}
	t := (len(*args)-acqFixed)/acqStride + 1
	if t > 99_999 {
		return x, false
	}
	fs := fields.String()
	rid := chunkHash(fs)
	b.grantRecs.put(prefix, rid)
	fmt.Fprintf(chunks, "%05d%02d%s%s", t, m, chunkHash(c), rid)
	var part [acqStride]any
	part[acqField], part[acqToken], part[acqFrom] = fs, "|"+prefix, ""
	*args = append(*args, part[:]...)
	return x + m, true
}

// chunkHash is what the claims set holds of a chunk's name.
func chunkHash(c string) string {
	h := fnv.New128a()
	h.Write([]byte(c))
	return hex.EncodeToString(h.Sum(nil))
}

// takenMax bounds the chunks one SMISMEMBER asks about.
const takenMax = 4096

func (b *redisDriver) Taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error) {
	key := b.k.claims(task, tickMS(tick))
	out := make([]bool, 0, len(chunks))
	for lo := 0; lo < len(chunks); lo += takenMax {
		hs := make([]any, 0, min(takenMax, len(chunks)-lo))
		for _, c := range chunks[lo:min(lo+takenMax, len(chunks))] {
			hs = append(hs, chunkHash(c))
		}
		t, err := b.c.SMIsMember(ctx, key, hs...).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, t...)
	}
	return out, nil
}

// renewEach renews each lease of ls by its own value (renew.lua).
func (b *redisDriver) renewEach(ctx context.Context, ls []*driver.Lease) ([]driver.Renewal, error) {
	type named struct {
		task   string
		shards int
	}
	gs := codec.GroupBy(len(ls), func(i int) named { return named{ls[i].Task, ls[i].Shards} })
	calls := make([]scriptCall, len(gs))
	for g, gr := range gs {
		args := make([]any, renFixed, renFixed+renStride*len(gr.Idx))
		args[renShards] = shardsArg(gr.Key.shards)
		bars := barred(len(gr.Idx), func(k int) string { return ls[gr.Idx[k]].Token })
		for k, j := range gr.Idx {
			var part [renStride]any
			part[renField], part[renToken], part[renTTL] = fieldArg(&ls[j].Entity), &bars[k], ms(ls[j].TTL)
			args = append(args, part[:]...)
		}
		calls[g] = scriptCall{keys: []string{b.k.entities(gr.Key.task), b.k.shards(gr.Key.task)}, args: args}
	}
	shortest := ls[0].TTL
	for _, l := range ls {
		shortest = min(shortest, l.TTL)
	}
	// A renewal the replicas lack does not move the trust window: the
	// round fails as if Redis had not answered.
	res, errs, err := runGroups(ctx, b, scriptRenew(), gs, calls, len(ls), ackWait(shortest))
	for _, e := range errs { // a round fails whole: its leases' windows move only together
		if e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, shardsErr(err)
	}
	ok := make([]driver.Renewal, len(ls))
	for i, v := range res {
		switch v {
		case renewedOK:
			ok[i] = driver.RenewOK
		case renewedRevoked:
			ok[i] = driver.RenewRevoked
		case renewedReplaced:
			ok[i] = driver.RenewReplaced
		}
	}
	return ok, nil
}

// runRecords encodes the run record of each lease at idx, cut from one
// allocation.
func runRecords(rs []driver.ReleaseArg, idx []int, replica string) []string {
	buf := make([]byte, 0, len(idx)*(72+len(replica)))
	ends := make([]int, len(idx))
	for k, i := range idx {
		r := rs[i]
		buf = runRecord{Outcome: r.Finished.Outcome, Start: unixMS(r.Finished.Started), End: unixMS(r.Finished.Ended), Fence: r.Lease.Fence,
			Reason: r.Lease.Reason, Replica: replica, Error: driver.CutError(r.Finished.Error)}.appendTo(buf)
		ends[k] = len(buf)
	}
	return codec.Strings(buf, ends)
}

// releaseEach releases each lease of rs by its own value (release.lua).
func (b *redisDriver) releaseEach(ctx context.Context, rs []driver.ReleaseArg) ([]driver.ReleaseReply, error) {
	replica := b.cfg.Replica
	type named struct {
		task   string
		shards int
	}
	gs := codec.GroupBy(len(rs), func(i int) named { return named{rs[i].Lease.Task, rs[i].Lease.Shards} })
	calls := make([]scriptCall, len(gs))
	for g, grn := range gs {
		gr := codec.Group[string]{Key: grn.Key.task, Idx: grn.Idx}
		// A batch of plain releases (nothing asked for after the runs, no
		// requests to answer: the fan-out's usual) leaves next and reqs out.
		stride := relStrideShort
		for _, j := range gr.Idx {
			if rs[j].Next != nil || len(rs[j].Lease.Requests) > 0 {
				stride = relStrideLong
				break
			}
		}
		args := make([]any, relFixed, relFixed+stride*len(gr.Idx))
		args[relPrefix], args[relStrideArg], args[relShards] = driver.Escape(gr.Key)+":", strconv.Itoa(stride), shardsArg(grn.Key.shards)
		args[relTwice] = twice(len(gr.Idx), func(k int) string { return rs[gr.Idx[k]].Lease.Entity })
		args[relRecords] = b.releaseRecords(rs, gr.Idx)
		bk := bucketOf(gr.Key)
		ks := []string{b.k.due(bk), b.k.dueInfo(bk), b.k.entities(gr.Key), b.k.followups(gr.Key)}
		recs := runRecords(rs, gr.Idx, replica)
		bars := barred(len(gr.Idx), func(k int) string { return rs[gr.Idx[k]].Lease.Token })
		for k, j := range gr.Idx {
			r := rs[j]
			// pointers: go-redis boxes a string with an allocation
			var part [relStrideLong]any
			part[relField], part[relToken], part[relRecord] = fieldArg(&r.Lease.Entity), &bars[k], &recs[k]
			if stride == relStrideShort {
				args = append(args, part[:relStrideShort]...)
				continue
			}
			var next any = ""
			if n := r.Next; n != nil {
				next = nextRun{Reason: n.Reason, DelayMS: n.Delay.Milliseconds(), Attempt: int64(n.Attempt), Carry: n.HandOver}.encode()
			}
			var reqs any = ""
			if len(r.Lease.Requests) > 0 {
				reqs = strings.Join(r.Lease.Requests, ",")
				ks = b.requestKeys(ks, gr.Key, r.Lease.Requests)
			}
			part[relNext], part[relReqs] = next, reqs
			args = append(args, part[:]...)
		}
		calls[g] = scriptCall{keys: append(ks, b.k.shards(gr.Key)), args: args}
	}
	// A release is not waited for: a failover that loses it leaves the
	// lease held on the promoted replica until its TTL passes. Each task's
	// call succeeds or fails alone: on a Cluster, the releases batched with
	// those of a task on a master that does not answer still go through.
	cmds := evalEach(ctx, b.c, scriptRelease(), calls)
	out := make([]driver.ReleaseReply, len(rs))
	for g, gr := range gs {
		r, err := cmds[g].Text()
		err = shardsErr(err)
		vs := strings.Split(r, " ")
		if err == nil && len(vs) != len(gr.Idx) {
			err = fmt.Errorf("lease: script reply has %d entries for %d requests", len(vs), len(gr.Idx))
		}
		for k, i := range gr.Idx {
			if err != nil {
				out[i].Err = err
				continue
			}
			code, sup, _ := strings.Cut(vs[k], ":")
			if sup != "" {
				if ms, perr := strconv.ParseInt(sup, 10, 64); perr == nil && ms > 0 {
					out[i].Superseded = time.UnixMilli(ms).UTC()
				}
			}
			switch code {
			case releasedNotHeld:
				out[i].Err = driver.ErrNotHeld
			case releasedFollowUp:
				out[i].FollowUp = true
			case releasedOK:
			default:
				out[i].Err = fmt.Errorf("%w: release reply %q", errFormat, vs[k])
			}
		}
	}
	return out, nil
}

// What the Redis driver is beside a driver: the Redis-only operations and
// the push of revocations from other replicas.
var (
	_ driver.Admin             = (*redisDriver)(nil)
	_ driver.RevocationWatcher = (*redisDriver)(nil)
)
