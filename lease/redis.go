package lease

import (
	"context"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// luaFiles are the scripts: lib.lua, the shared library, and one file per
// script.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaFile is the text of lua/name.lua.
func luaFile(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded: only a misspelt name gets here, at start-up
	}
	return string(b)
}

// Every script is the constants Go shares with Lua, the shared library, then
// its own body.
var (
	scriptAcquire  = newScript(luaFile("acquire"))
	scriptRenew    = newScript(luaFile("renew"))
	scriptRelease  = newScript(luaFile("release"))
	scriptEnqueue  = newScript(luaFile("enqueue"))
	scriptTake     = newScript(luaFile("take"))
	scriptAck      = newScript(luaFile("ack"))
	scriptUnlock   = newScript(luaFile("unlock"))
	scriptSweep    = newScript(luaFile("sweep"))
	scriptAnnounce = newScript(luaFile("announce"))
	scriptKnown    = newScript(luaFile("known"))
	scriptEpoch    = newScript(luaFile("epoch"))
	scriptProbe    = newScript(luaFile("probe"))
)

// luaPrelude begins every script: the shared constants, then lib.lua.
var luaPrelude = luaConstants() + luaFile("lib")

func newScript(body string) *redis.Script { return redis.NewScript(luaPrelude + body) }

// RedisClient is what the store needs of a go-redis client.
type RedisClient interface {
	redis.Scripter
	redis.Cmdable
}

type redisBackend struct {
	c    RedisClient
	k    keys
	opts *Options
	acks *acker // nil: never wait for replicas
	gate layoutGate
	// shardAcks holds an acker per Cluster master, by address.
	shardAcks sync.Map
	// own marks the buckets of the tasks this replica last announced; polls
	// counts take's polls.
	own   atomic.Pointer[[]bool]
	polls atomic.Uint64
	// maxTTL is the store's MaxTTL (raised by CoverTTL): the quarantine of a
	// bucket found without an epoch.
	maxTTL func() time.Duration
}

// NewRedis returns a Store whose leases live in Redis under prefix. Replicas
// that share the Redis and the prefix coordinate. Close the Store when done;
// the client is the caller's.
func NewRedis(c RedisClient, prefix string, opts Options) (*Store, error) {
	if !ValidPrefix(prefix) {
		return nil, fmt.Errorf("lease: key prefix %q: use letters, digits and . _ - : only", prefix)
	}
	b := &redisBackend{c: c, k: keys{prefix: prefix}}
	if opts.ReplicaAcks != AcksNever {
		b.acks = &acker{mode: opts.ReplicaAcks}
	}
	s := newStore(b, opts, func(o *Options) { b.opts = o })
	b.maxTTL = s.MaxTTL
	return s, nil
}

// pageSize is how many keys, fields or due entries one SCAN, HSCAN, sweep
// or ZRANGE page reads (status and the sweep walk everything a page at a
// time).
const pageSize = 1000

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// unixMS and msTime convert between times and the Unix milliseconds stored
// in Redis, where 0 stands for the zero time.
func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func msTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func fromMS(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return msTime(n)
}

func tickMS(t time.Time) string { return strconv.FormatInt(unixMS(t), 10) }

// group is the positions in a batch of the requests that share key, in order.
type group[K comparable] struct {
	key K
	idx []int
}

// groupBy splits a batch by key, in first-seen order. Each task's entities
// live in one hash, read and written by one script call per group.
func groupBy[K comparable](n int, key func(i int) K) []group[K] {
	var gs []group[K]
	at := map[K]int{}
	for i := range n {
		k := key(i)
		j, ok := at[k]
		if !ok {
			j = len(gs)
			at[k] = j
			gs = append(gs, group[K]{key: k})
		}
		gs[j].idx = append(gs[j].idx, i)
	}
	return gs
}

// scriptCall is one call of a script.
type scriptCall struct {
	keys []string
	args []any
}

// runGroups runs one call per group (calls[g] for gs[g]) in one round trip
// and returns the replies in batch order: reply i answers the request at
// position i, out of n. Each call must answer one element per request. With
// ackWithin > 0, the round trip also waits that long for the replicas; a
// shortfall returns the replies with an *AckError.
func runGroups[K comparable](ctx context.Context, b *redisBackend, sc *redis.Script, gs []group[K], calls []scriptCall, n int, ackWithin time.Duration) ([]string, error) {
	out := make([]string, n)
	if len(calls) == 0 {
		return out, nil
	}
	res, err := b.runEach(ctx, sc, calls, ackWithin)
	if res == nil {
		return nil, err
	}
	for g, gr := range gs {
		if len(res[g]) != len(gr.idx) {
			return nil, fmt.Errorf("lease: script reply has %d entries for %d requests", len(res[g]), len(gr.idx))
		}
		for k, i := range gr.idx {
			out[i] = res[g][k]
		}
	}
	return out, err
}

// runEach runs one call of sc per group in one round trip and returns each
// call's answers: the scripts join them with spaces (lib.lua's reply).
func (b *redisBackend) runEach(ctx context.Context, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([][]string, error) {
	if len(calls) == 1 && (ackWithin <= 0 || b.acks == nil) { // Run loads the script itself when needed
		r, err := sc.Run(ctx, b.c, calls[0].keys, calls[0].args...).Text()
		if err != nil {
			return nil, err
		}
		return [][]string{splitReply(r)}, nil
	}
	cmds, err := b.eval(ctx, sc, calls, ackWithin)
	if cmds == nil {
		return nil, err
	}
	out := make([][]string, len(calls))
	for i, c := range cmds {
		r, cerr := c.Text()
		if cerr != nil {
			return nil, cerr
		}
		out[i] = splitReply(r)
	}
	return out, err
}

// splitReply splits a script's answers (lib.lua's reply): joined with
// spaces, "x*N" standing for N answers x.
func splitReply(r string) []string {
	parts := strings.Split(r, " ")
	if strings.IndexByte(r, '*') < 0 {
		return parts
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		x, count, _ := strings.Cut(p, "*")
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 || n > maxRepeat {
			out = append(out, p) // not a repeat: the answer's decoder refuses it
			continue
		}
		for range n {
			out = append(out, x)
		}
	}
	return out
}

// maxRepeat bounds the count of a repeated answer (splitReply): no call
// answers more requests than a batch holds.
const maxRepeat = BatchSize

// eval runs the calls of sc in one pipeline. A Redis that restarted, or a
// primary new after a failover, has not got the script: it is loaded and
// the pipeline sent again.
//
// With ackWithin > 0 (and acknowledgement on) the pipeline ends with a WAIT
// on the same connection (acker.queue): one per batch, not per lease. If
// the replicas fall short, the commands come back with an *AckError: the
// writes happened on the primary but must not be trusted.
func (b *redisBackend) eval(ctx context.Context, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	if ackWithin <= 0 || b.acks == nil {
		return evalOn(ctx, b.c, nil, sc, calls, 0)
	}
	if cc, ok := b.c.(*redis.ClusterClient); ok { // a Cluster pipeline spans shards: a WAIT per shard
		return b.evalShards(ctx, cc, sc, calls, ackWithin)
	}
	return evalOn(ctx, b.c, b.acks, sc, calls, ackWithin)
}

// evalOn runs calls in one pipeline on c, ending with acks' WAIT when acks
// is given (c is then one node: the WAIT must run on the connection of the
// writes).
func evalOn(ctx context.Context, c RedisClient, acks *acker, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, call := range calls {
		cmds[i] = sc.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	round, err := acks.queue(ctx, c, pipe, ackWithin)
	if err != nil {
		return nil, err
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil, err
		}
		if err := sc.Load(ctx, c).Err(); err != nil {
			return nil, err
		}
		return evalOn(ctx, c, acks, sc, calls, ackWithin)
	}
	return cmds, round.check(ctx, c)
}

// evalShards runs calls on a Redis Cluster with acknowledgement per shard:
// the calls of each master in one pipeline on that master, with its own
// WAIT (and, under AcksAuto, its own count of replicas), the masters in
// parallel. A shard that falls short fails the whole batch with its
// *AckError (the grants of the others are handed back too: safe, and
// rare). A call routed to a master that no longer serves its slot (a
// failover, a resharding) makes the client reload the slot map, and the
// batch is sent once more.
func (b *redisBackend) evalShards(ctx context.Context, cc *redis.ClusterClient, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	for attempt := 0; ; attempt++ {
		cmds, err := b.evalShardsOnce(ctx, cc, sc, calls, ackWithin)
		var ackErr *AckError
		if err == nil || errors.As(err, &ackErr) {
			return cmds, err
		}
		// A master that moved or died: the client's slot map is reloaded,
		// and a slot moved is tried once more at once.
		cc.ReloadState(ctx)
		if attempt > 0 || !redis.HasErrorPrefix(err, "MOVED") {
			return cmds, err
		}
	}
}

func (b *redisBackend) evalShardsOnce(ctx context.Context, cc *redis.ClusterClient, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	byNode := map[*redis.Client][]int{}
	for i, call := range calls {
		node, err := cc.MasterForKey(ctx, call.keys[0])
		if err != nil {
			return nil, err
		}
		byNode[node] = append(byNode[node], i)
	}
	cmds := make([]*redis.Cmd, len(calls))
	errs := make([]error, 0, len(byNode))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, idx := range byNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := make([]scriptCall, len(idx))
			for k, i := range idx {
				sub[k] = calls[i]
			}
			got, err := evalOn(ctx, node, b.ackerFor(node.Options().Addr), sc, sub, ackWithin)
			mu.Lock()
			defer mu.Unlock()
			for k, i := range idx {
				if got != nil {
					cmds[i] = got[k]
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	var ackErr *AckError
	for _, err := range errs {
		if !errors.As(err, &ackErr) {
			return nil, err // no answer from a shard: the batch has none
		}
	}
	if ackErr != nil {
		return cmds, ackErr
	}
	return cmds, nil
}

// ackerFor is the acker of one Cluster master: each counts its own
// replicas.
func (b *redisBackend) ackerFor(addr string) *acker {
	if a, ok := b.shardAcks.Load(addr); ok {
		return a.(*acker)
	}
	a, _ := b.shardAcks.LoadOrStore(addr, &acker{mode: b.acks.mode})
	return a.(*acker)
}

// allBucketsEvery is how often a due poll looks at every bucket, not only
// those of the replica's own tasks.
const allBucketsEvery = 10

// enqueueWait bounds how long a due entry written outside a lease (a
// trigger, a given-back entry) waits for the replicas.
const enqueueWait = ackWaitMax

func (b *redisBackend) acquire(ctx context.Context, holder string, maxTTL time.Duration, reqs []acquireArg) ([]acquireReply, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	out := make([]acquireReply, len(reqs))
	var live []int // requests to send: the others were rejected before
	for i, a := range reqs {
		if a.token != "" {
			live = append(live, i)
		}
	}
	// What a fan-out batch shares is sent once: task, TTL, reason, tick and
	// queue; per entity only its field, token and due entry.
	type shared struct {
		task, reason, tick string
		ttl                time.Duration
		queue              bool
	}
	var lastTick time.Time // a fan-out batch's requests share their tick: formatted once
	lastTickS := ""
	gs := groupBy(len(live), func(i int) shared {
		r := reqs[live[i]].req
		tick := "0"
		if r.Reason == ReasonTick {
			if lastTickS == "" || !r.Tick.Equal(lastTick) {
				lastTick, lastTickS = r.Tick, tickMS(r.Tick)
			}
			tick = lastTickS
		}
		return shared{task: r.Task, reason: string(r.Reason), tick: tick, ttl: r.TTL, queue: r.Queue}
	})
	holderArg := escape(holder)
	calls := make([]scriptCall, len(gs))
	for g, gr := range gs {
		k := gr.key
		queue := "0"
		if k.queue {
			queue = "1"
		}
		args := make([]any, 8, 8+3*len(gr.idx))
		args[0], args[1], args[2], args[3], args[4], args[5], args[6] = ms(maxTTL), holderArg, escape(k.task)+":", ms(k.ttl), k.reason, k.tick, queue
		bk := bucketOf(k.task)
		ks := []string{b.k.epoch(bk), b.k.due(bk), b.k.dueInfo(bk), b.k.entities(k.task), b.k.followups(k.task)}
		var chunks strings.Builder
		for x := 0; x < len(gr.idx); {
			if y, ok := b.chunkArgs(&args, &chunks, reqs, live, gr.idx, x); ok {
				x = y
				continue
			}
			a := &reqs[live[gr.idx[x]]] // pointers: go-redis boxes a string with an allocation
			var from any = ""
			if d := a.req.From; d != nil {
				from = dueFrom{Claim: d.claim, Tick: unixMS(d.Tick), Reqs: d.Requests}.encode()
				ks = b.requestKeys(ks, k.task, d.Requests)
			}
			args = append(args, &a.field, &a.token, from)
			x++
		}
		args[7] = chunks.String()
		if chunks.Len() > 0 {
			ks = slices.Insert(ks, 5, b.k.claims(k.task, k.tick))
		}
		calls[g] = scriptCall{keys: ks, args: args}
	}
	var shortest time.Duration
	for _, g := range gs {
		if shortest == 0 || g.key.ttl < shortest {
			shortest = g.key.ttl
		}
	}
	res, err := runGroups(ctx, b, scriptAcquire, gs, calls, len(live), ackWait(shortest))
	if res == nil {
		return nil, err
	}
	for j, v := range res {
		var derr error
		if out[live[j]], derr = decodeAcquireReply(v); derr != nil {
			return nil, derr
		}
	}
	return out, err // an *AckError: the grants stand on the primary, untrusted
}

// claimsTTL is how long a tick's taken chunks (Request.Chunk) are kept
// after the last one was taken: longer than replicas' fan-outs of one tick
// drift apart. A fan-out later than that reads each of its entities again,
// which is correct, only dearer.
const claimsTTL = 2 * time.Minute

// chunkArgs sends the chunk (Request.Chunk) that starts at a group's x-th
// request, if one does, as one triple of acquire.lua's arguments: its
// fields space-joined, its tokens' prefix (Store.tokens), and "" for its due
// entry; chunks gets "t:m:id", the triple's position among the triples, the
// chunk's length and a hash of its id. It answers the position after the
// chunk, or false for a request in no chunk (or one whose tokens are not a
// chunk's), which is sent alone.
func (b *redisBackend) chunkArgs(args *[]any, chunks *strings.Builder, reqs []acquireArg, live, idx []int, x int) (int, bool) {
	at := func(k int) *acquireArg { return &reqs[live[idx[x+k]]] }
	c := at(0).req.Chunk
	if c == "" {
		return x, false
	}
	m := 1
	for x+m < len(idx) && at(m).req.Chunk == c {
		m++
	}
	if m < 2 {
		return x, false
	}
	prefix, ok := chunkPrefix(func(k int) string { return at(k).token }, m)
	if !ok {
		return x, false
	}
	var fields strings.Builder
	for k := range m {
		if k > 0 {
			fields.WriteByte(' ')
		}
		fields.WriteString(at(k).field)
	}
	if chunks.Len() > 0 {
		chunks.WriteByte(' ')
	}
	fmt.Fprintf(chunks, "%d:%d:%s", (len(*args)-8)/3+1, m, chunkHash(c))
	*args = append(*args, fields.String(), prefix, "")
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

func (b *redisBackend) taken(ctx context.Context, task string, tick time.Time, chunks []string) ([]bool, error) {
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

func (b *redisBackend) renew(ctx context.Context, ls []*Lease) ([]bool, error) {
	gs := groupBy(len(ls), func(i int) string { return ls[i].Task })
	calls := make([]scriptCall, len(gs))
	for g, gr := range gs {
		args := make([]any, 0, 3*len(gr.idx))
		for _, j := range gr.idx {
			args = append(args, &ls[j].field, &ls[j].token, ms(ls[j].ttl))
		}
		calls[g] = scriptCall{keys: []string{b.k.entities(gr.key)}, args: args}
	}
	shortest := ls[0].ttl
	for _, l := range ls {
		shortest = min(shortest, l.ttl)
	}
	// A renewal the replicas lack does not move the trust window: the
	// round fails as if Redis had not answered.
	res, err := runGroups(ctx, b, scriptRenew, gs, calls, len(ls), ackWait(shortest))
	if err != nil {
		return nil, err
	}
	ok := make([]bool, len(ls))
	for i, v := range res {
		ok[i] = v == renewedOK
	}
	return ok, nil
}

// runRecords encodes the run record of each lease at idx, cut from one
// allocation.
func runRecords(rs []releaseArg, idx []int, replica string) []string {
	buf := make([]byte, 0, len(idx)*(72+len(replica)))
	ends := make([]int, len(idx))
	for k, i := range idx {
		r := rs[i]
		buf = runRecord{Outcome: r.o.Outcome, Start: unixMS(r.o.Started), End: unixMS(r.o.Ended), Fence: r.l.Fence,
			Reason: r.l.Reason, Replica: replica}.appendTo(buf)
		ends[k] = len(buf)
	}
	return cut(buf, ends)
}

func (b *redisBackend) release(ctx context.Context, rs []releaseArg) ([]releaseReply, error) {
	replica := b.opts.Replica
	gs := groupBy(len(rs), func(i int) string { return rs[i].l.Task })
	calls := make([]scriptCall, len(gs))
	for g, gr := range gs {
		// A batch of plain releases (nothing asked for after the runs, no
		// requests to answer: the fan-out's usual) leaves next and reqs out.
		stride := 3
		for _, j := range gr.idx {
			if rs[j].next != nil || len(rs[j].l.Requests) > 0 {
				stride = 5
				break
			}
		}
		args := make([]any, 0, 2+stride*len(gr.idx))
		args = append(args, escape(gr.key)+":", strconv.Itoa(stride))
		bk := bucketOf(gr.key)
		ks := []string{b.k.due(bk), b.k.dueInfo(bk), b.k.entities(gr.key), b.k.followups(gr.key)}
		recs := runRecords(rs, gr.idx, replica)
		for k, j := range gr.idx {
			r := rs[j]
			// pointers: go-redis boxes a string with an allocation
			args = append(args, &r.l.field, &r.l.token, &recs[k])
			if stride == 3 {
				continue
			}
			var next any = ""
			if n := r.next; n != nil {
				next = nextRun{Reason: n.Reason, DelayMS: n.Delay.Milliseconds(), Attempt: int64(n.Attempt), Carry: n.HandOver}.encode()
			}
			var reqs any = ""
			if len(r.l.Requests) > 0 {
				reqs = strings.Join(r.l.Requests, ",")
				ks = b.requestKeys(ks, gr.key, r.l.Requests)
			}
			args = append(args, next, reqs)
		}
		calls[g] = scriptCall{keys: ks, args: args}
	}
	// A release is not waited for: a failover that loses it leaves the
	// lease held on the promoted replica until its TTL passes. Each task's
	// call succeeds or fails alone: on a Cluster, the releases batched with
	// those of a task on a master that does not answer still go through.
	cmds := evalEach(ctx, b.c, scriptRelease, calls)
	out := make([]releaseReply, len(rs))
	for g, gr := range gs {
		r, err := cmds[g].Text()
		vs := strings.Split(r, " ")
		if err == nil && len(vs) != len(gr.idx) {
			err = fmt.Errorf("lease: script reply has %d entries for %d requests", len(vs), len(gr.idx))
		}
		for k, i := range gr.idx {
			if err != nil {
				out[i].err = err
				continue
			}
			switch vs[k] {
			case releasedNotHeld:
				out[i].err = ErrNotHeld
			case releasedFollowUp:
				out[i].followUp = true
			case releasedOK:
			default:
				out[i].err = fmt.Errorf("%w: release reply %q", errFormat, vs[k])
			}
		}
	}
	return out, nil
}

// evalEach runs calls of sc in one pipeline and leaves each call's own
// answer or error in its command: on a Cluster a shard that does not
// answer fails only its own calls. Calls that found the script missing (a
// restarted Redis, a promoted replica) are sent again once it is loaded.
func evalEach(ctx context.Context, c RedisClient, sc *redis.Script, calls []scriptCall) []*redis.Cmd {
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, call := range calls {
		cmds[i] = sc.EvalSha(ctx, pipe, call.keys, call.args...)
	}
	pipe.Exec(ctx) //nolint:errcheck // each command keeps its own error
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	// On a Cluster, loaded on the masters that lacked it: one that does not
	// answer must not keep the script from the others.
	if cc, ok := c.(*redis.ClusterClient); ok {
		loaded := again[:0]
		for _, i := range again {
			node, err := cc.MasterForKey(ctx, calls[i].keys[0])
			if err == nil && sc.Load(ctx, node).Err() == nil {
				loaded = append(loaded, i)
			}
		}
		again = loaded
	} else if sc.Load(ctx, c).Err() != nil {
		return cmds
	}
	pipe = c.Pipeline()
	for _, i := range again {
		cmds[i] = sc.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	pipe.Exec(ctx) //nolint:errcheck // as above
	return cmds
}

func (b *redisBackend) enqueue(ctx context.Context, d Due, delay time.Duration) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	// Acknowledged, so that a trigger said to be stored survives a failover.
	bk := bucketOf(d.Task)
	_, err := b.eval(ctx, scriptEnqueue, []scriptCall{{keys: []string{b.k.due(bk), b.k.dueInfo(bk)},
		args: []any{member(d.Task, d.Entity), string(d.Reason), ms(delay), strconv.Itoa(d.Attempt), tickMS(d.Tick),
			strings.Join(d.Requests, ",")}}}, enqueueWait)
	return err
}

// requestKeys adds to ks the answer hashes of task's requests ids that it
// does not hold yet: a script finds each among its KEYS by the id.
func (b *redisBackend) requestKeys(ks []string, task string, ids []string) []string {
	for _, id := range ids {
		if k := b.k.request(task, id); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// take looks, in one round trip, at the earliest entry of the due sets of
// the buckets of the tasks this replica announced (of all 64 every
// allBucketsEvery polls, and always when it announced none), then takes
// from the buckets where one is due, one script call each, in a second
// round trip. A poll with nothing due costs one cheap read per bucket
// looked at; an entry of a task no announced task shares a bucket with (a
// task this replica does not run) is seen within allBucketsEvery polls.
func (b *redisBackend) take(ctx context.Context, limit int, vis time.Duration, prefix string) ([]Due, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	pipe := b.c.Pipeline()
	firsts := make([]*redis.ZSliceCmd, buckets)
	own := b.own.Load()
	all := own == nil || b.polls.Add(1)%allBucketsEvery == 0
	for bk := range firsts {
		if all || (*own)[bk] {
			firsts[bk] = pipe.ZRangeWithScores(ctx, b.k.due(bk), 0, 0)
		}
	}
	tm := pipe.Time(ctx)
	// On a Cluster, a shard that does not answer leaves the others' due
	// entries to be taken: only its buckets are skipped.
	if _, err := pipe.Exec(ctx); err != nil && !anyOK(firsts) {
		return nil, err
	}
	// The clock only picks the buckets to take from (the take script asks
	// its own shard's): a shard's clock a little ahead of the one read, or
	// this replica's when the node TIME went to did not answer, delays an
	// entry by a poll at most.
	now := float64(time.Now().UnixMilli())
	if tm.Err() == nil {
		now = float64(tm.Val().UnixMilli())
	}
	type ready struct {
		bk    int
		first float64
	}
	var rs []ready
	for bk, f := range firsts {
		if f == nil {
			continue
		}
		if zs := f.Val(); len(zs) == 1 && zs[0].Score <= now {
			rs = append(rs, ready{bk, zs[0].Score})
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	// Never take more than limit in all (what is taken is hidden until its
	// visibility passes): the limit is shared out, earliest buckets first.
	sort.Slice(rs, func(i, j int) bool { return rs[i].first < rs[j].first })
	rs = rs[:min(len(rs), limit)]
	calls := make([]scriptCall, len(rs))
	for i, r := range rs {
		n := limit / len(rs)
		if i < limit%len(rs) {
			n++
		}
		calls[i] = scriptCall{keys: []string{b.k.due(r.bk), b.k.dueInfo(r.bk)},
			args: []any{n, ms(vis), prefix + "." + strconv.Itoa(r.bk)}}
	}
	cmds, err := b.eval(ctx, scriptTake, calls, 0)
	if err != nil && len(calls) > 1 {
		cmds, err = b.eachAlone(ctx, scriptTake, calls)
	}
	if err != nil {
		return nil, err
	}
	var out []Due
	for _, c := range cmds {
		res, err := c.Slice()
		if err != nil {
			continue // a shard that does not answer; err is nil if none did
		}
		for i := 0; i+2 < len(res); i += 3 {
			d, err := parseDue(str(res[i]), str(res[i+1]), str(res[i+2]))
			if err != nil {
				continue // not ours to understand; it stays and expires by visibility
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// anyOK says whether any of cmds succeeded.
func anyOK(cmds []*redis.ZSliceCmd) bool {
	for _, c := range cmds {
		if c != nil && c.Err() == nil {
			return true
		}
	}
	return false
}

// eachAlone runs each call on its own, after a pipeline of them failed: on
// a Cluster, the calls of the shards that answer still count. It fails
// only when every call did.
func (b *redisBackend) eachAlone(ctx context.Context, sc *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	var last error
	ok := 0
	for i, c := range calls {
		cmds[i] = sc.Run(ctx, b.c, c.keys, c.args...)
		if last = cmds[i].Err(); last == nil {
			ok++
		}
	}
	if ok == 0 {
		return nil, last
	}
	return cmds, nil
}

// parseDue decodes a due member, its info (dueInfo) and its score.
func parseDue(m, info, score string) (Due, error) {
	task, entity, err := splitMember(m)
	if err != nil {
		return Due{}, err
	}
	d, err := decodeDueInfo(info)
	if err != nil {
		return Due{}, err
	}
	sc, _ := strconv.ParseFloat(score, 64)
	return Due{Task: task, Entity: entity, Reason: d.Reason, Attempt: int(d.Attempt), Tick: msTime(d.Tick),
		At: time.UnixMilli(int64(sc)), Requests: d.Reqs, claim: d.Claim}, nil
}

func (b *redisBackend) ack(ctx context.Context, d Due) error {
	bk := bucketOf(d.Task)
	ks := b.requestKeys([]string{b.k.due(bk), b.k.dueInfo(bk)}, d.Task, d.Requests)
	return scriptAck.Run(ctx, b.c, ks, member(d.Task, d.Entity), d.claim, escape(d.Entity), strings.Join(d.Requests, ",")).Err()
}

func (b *redisBackend) answers(ctx context.Context, task, id string) (map[string]Outcome, error) {
	m, err := b.c.HGetAll(ctx, b.k.request(task, id)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Outcome, len(m))
	for f, v := range m {
		if e, err := unescape(f); err == nil {
			out[e] = Outcome(v)
		}
	}
	return out, nil
}

func (b *redisBackend) forget(ctx context.Context, task, id string) error {
	return b.c.Del(ctx, b.k.request(task, id)).Err()
}

func (b *redisBackend) unlock(ctx context.Context, task, entity, by string) (Held, bool, error) {
	res, err := scriptUnlock.Run(ctx, b.c, []string{b.k.entities(task)}, escape(entity), escape(by)).StringSlice()
	if err != nil || len(res) < 3 {
		return Held{}, false, err
	}
	f, _ := strconv.ParseInt(res[2], 10, 64)
	holder, _ := unescape(res[0])
	return Held{Task: task, Entity: entity, Holder: holder, Since: fromMS(res[1]), Fence: f}, true, nil
}

// serverMS reads Redis's clock, against which leases expire.
func (b *redisBackend) serverMS(ctx context.Context) (int64, error) {
	t, err := b.c.Time(ctx).Result()
	return t.UnixMilli(), err
}

// tasks walks the tasks that have a hash: task, or every one for "".
func (b *redisBackend) tasks(ctx context.Context, task string, fn func(task string) error) error {
	if task != "" {
		return fn(task)
	}
	return b.scan(ctx, b.k.entitiesPattern(), func(k string) error {
		if t, ok := b.k.taskOf(k); ok {
			return fn(t)
		}
		return nil
	})
}

// scan walks the keys that match pattern, a SCAN page at a time: on every
// master of a Cluster, one after the other.
func (b *redisBackend) scan(ctx context.Context, pattern string, fn func(key string) error) error {
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, pattern, pageSize).Result()
			if err != nil {
				return fmt.Errorf("scan %s: %w", pattern, err)
			}
			for _, k := range ks {
				if err := fn(k); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	cc, ok := b.c.(*redis.ClusterClient)
	if !ok {
		return one(ctx, b.c)
	}
	var mu sync.Mutex // fn is called from one master at a time
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return one(ctx, node)
	})
}

// entities walks the entities of task ("" for every task) a page at a time
// (HSCAN), with Redis's clock read once per page.
func (b *redisBackend) entities(ctx context.Context, task string, fn func(task, entity string, e entityValue, now int64) error) error {
	return b.tasks(ctx, task, func(task string) error {
		var cursor uint64
		for {
			kv, next, err := b.c.HScan(ctx, b.k.entities(task), cursor, "", pageSize).Result()
			if err != nil {
				return fmt.Errorf("hscan %s: %w", b.k.entities(task), err)
			}
			now, err := b.serverMS(ctx)
			if err != nil {
				return err
			}
			for i := 0; i+1 < len(kv); i += 2 {
				entity, err := unescape(kv[i])
				e, derr := decodeEntity(kv[i+1])
				if err != nil || derr != nil {
					continue // not ours to understand
				}
				if err := fn(task, entity, e, now); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	})
}

func (b *redisBackend) leases(ctx context.Context, task string, fn func(Held) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, now int64) error {
		if h, ok := e.held(task, entity, now); ok {
			return fn(h)
		}
		return nil
	})
}

func (b *redisBackend) lastRuns(ctx context.Context, task string, fn func(LastRun) error) error {
	return b.entities(ctx, task, func(task, entity string, e entityValue, _ int64) error {
		if r, ok := e.lastRun(task, entity); ok {
			return fn(r)
		}
		return nil
	})
}

// claimSweep takes the sweep key for one interval: the replicas sharing a
// Redis sweep once per interval between them, not once each.
func (b *redisBackend) claimSweep(ctx context.Context, every time.Duration) (bool, error) {
	return b.c.SetNX(ctx, b.k.sweep(), b.opts.Replica, every).Result()
}

// sweep deletes, a page at a time, the entities neither held nor touched
// within StateTTL (Redis 7.0 has no expiry for hash fields).
func (b *redisBackend) sweep(ctx context.Context) error {
	return b.tasks(ctx, "", func(task string) error {
		cursor := "0"
		for {
			res, err := scriptSweep.Run(ctx, b.c, []string{b.k.entities(task)}, cursor, pageSize, ms(b.opts.StateTTL)).Slice()
			if err != nil {
				return fmt.Errorf("sweep %s: %w", task, err)
			}
			if len(res) != 2 {
				return fmt.Errorf("sweep %s: reply has %d entries, want 2", task, len(res))
			}
			if cursor = str(res[0]); cursor == "0" {
				return nil
			}
		}
	})
}

// str turns a script reply element (string or integer) into a string.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// dueEntries walks the due entries of task's bucket (every bucket for ""),
// a page at a time, earliest first within a bucket.
func (b *redisBackend) dueEntries(ctx context.Context, task string, fn func(Due) error) error {
	for bk := range buckets {
		if task != "" && bk != bucketOf(task) {
			continue
		}
		if err := b.bucketDue(ctx, bk, task, fn); err != nil {
			return err
		}
	}
	return nil
}

func (b *redisBackend) bucketDue(ctx context.Context, bk int, task string, fn func(Due) error) error {
	for off := int64(0); ; off += pageSize {
		zs, err := b.c.ZRangeWithScores(ctx, b.k.due(bk), off, off+pageSize-1).Result()
		if err != nil {
			return err
		}
		if len(zs) == 0 {
			return nil
		}
		ms := make([]string, len(zs))
		for i, z := range zs {
			ms[i] = z.Member.(string)
		}
		infos, err := b.c.HMGet(ctx, b.k.dueInfo(bk), ms...).Result()
		if err != nil {
			return err
		}
		for i, z := range zs {
			d, err := parseDue(ms[i], str(infos[i]), strconv.FormatFloat(z.Score, 'f', 0, 64))
			if err != nil || (task != "" && d.Task != task) {
				continue
			}
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(zs) < pageSize {
			return nil
		}
	}
}

func (b *redisBackend) one(ctx context.Context, task, entity string) (EntityState, error) {
	m := member(task, entity)
	pipe := b.c.Pipeline()
	eg, tm := pipe.HGet(ctx, b.k.entities(task), escape(entity)), pipe.Time(ctx)
	bk := bucketOf(task)
	ds, di := pipe.ZScore(ctx, b.k.due(bk), m), pipe.HGet(ctx, b.k.dueInfo(bk), m)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return EntityState{}, err
	}
	var st EntityState
	if e, err := decodeEntity(eg.Val()); err == nil {
		if h, ok := e.held(task, entity, tm.Val().UnixMilli()); ok {
			st.Held = &h
		}
		if r, ok := e.lastRun(task, entity); ok {
			st.Last = &r
		}
	}
	if ds.Err() == nil {
		if d, err := parseDue(m, di.Val(), strconv.FormatFloat(ds.Val(), 'f', 0, 64)); err == nil {
			st.Pending = &d
		}
	}
	return st, nil
}

func (b *redisBackend) dueCount(ctx context.Context) (int, error) {
	pipe := b.c.Pipeline()
	cards := make([]*redis.IntCmd, buckets)
	for bk := range cards {
		cards[bk] = pipe.ZCard(ctx, b.k.due(bk))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cards {
		n += int(c.Val())
	}
	return n, nil
}

func (b *redisBackend) setPaused(ctx context.Context, task string, paused bool) error {
	if paused {
		return b.c.SAdd(ctx, b.k.paused(), task).Err()
	}
	return b.c.SRem(ctx, b.k.paused(), task).Err()
}

func (b *redisBackend) paused(ctx context.Context) (map[string]bool, error) {
	ts, err := b.c.SMembers(ctx, b.k.paused()).Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(ts))
	for _, t := range ts {
		m[t] = true
	}
	return m, nil
}

func (b *redisBackend) ping(ctx context.Context) error { return b.c.Ping(ctx).Err() }

func (b *redisBackend) announce(ctx context.Context, a announceValue, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil { // a replica that refuses the layout is not running
		return err
	}
	own := make([]bool, buckets)
	for _, t := range a.Tasks {
		own[bucketOf(t)] = true
	}
	b.own.Store(&own)
	r, err := scriptAnnounce.Run(ctx, b.c, []string{b.k.replicas()}, escape(b.opts.Replica), ms(ttl),
		a.tasksField(), a.Process, escape(a.Host), escape(a.Version)).Text()
	if err != nil {
		return err
	}
	if rest, ok := strings.CutPrefix(r, "dup|"); ok {
		h, since, _ := strings.Cut(rest, "|")
		host, _ := unescape(h)
		n, _ := number(since)
		return &DuplicateReplicaError{Replica: b.opts.Replica, Host: host, Since: msTime(n)}
	}
	return nil
}

func (b *redisBackend) replicas(ctx context.Context) ([]Replica, error) {
	all, err := b.c.HGetAll(ctx, b.k.replicas()).Result()
	if err != nil {
		return nil, err
	}
	now, err := b.serverMS(ctx)
	if err != nil {
		return nil, err
	}
	var rs []Replica
	for id, v := range all {
		a, err := decodeAnnounce(v)
		if err != nil || a.Until < now {
			continue
		}
		name, _ := unescape(id)
		rs = append(rs, Replica{ID: name, Host: a.Host, Version: a.Version, Tasks: a.Tasks, Since: msTime(a.Since), Seen: msTime(a.Seen)})
	}
	return rs, nil
}

func (b *redisBackend) known(ctx context.Context, task string) (bool, error) {
	n, err := scriptKnown.Run(ctx, b.c, []string{b.k.replicas()}, escape(task)).Int()
	return n == 1, err
}

// InitEpoch declares that this Redis holds no lease any process could still
// trust, so the data-loss quarantine does not apply to it. Use it only on a
// Redis that is new to tickd (tests, a fresh deployment); after a real data
// loss, let the quarantine run its course.
func (s *Store) InitEpoch(ctx context.Context) error {
	b, ok := s.b.(*redisBackend)
	if !ok {
		return nil
	}
	pipe := b.c.Pipeline()
	for bk := range buckets {
		pipe.SetNX(ctx, b.k.epoch(bk), epochValue{}.encode(), 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
