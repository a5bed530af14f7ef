package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/lib.lua
var luaLib string

//go:embed lua/acquire.lua
var luaAcquire string

//go:embed lua/renew.lua
var luaRenew string

//go:embed lua/release.lua
var luaRelease string

//go:embed lua/enqueue.lua
var luaEnqueue string

//go:embed lua/take.lua
var luaTake string

//go:embed lua/ack.lua
var luaAck string

//go:embed lua/unlock.lua
var luaUnlock string

// Every script is the shared library followed by its own body.
var (
	scriptAcquire = redis.NewScript(luaLib + luaAcquire)
	scriptRenew   = redis.NewScript(luaRenew)
	scriptRelease = redis.NewScript(luaLib + luaRelease)
	scriptEnqueue = redis.NewScript(luaLib + luaEnqueue)
	scriptTake    = redis.NewScript(luaLib + luaTake)
	scriptAck     = redis.NewScript(luaLib + luaAck)
	scriptUnlock  = redis.NewScript(luaLib + luaUnlock)
)

// RedisClient is what the store needs of a go-redis client.
type RedisClient interface {
	redis.Scripter
	redis.Cmdable
}

type redisBackend struct {
	c    RedisClient
	k    keys
	opts *Options
}

// NewRedis returns a Store whose leases live in Redis under prefix. Replicas
// that share the Redis and the prefix coordinate. Close the Store when done;
// the client is the caller's.
func NewRedis(c RedisClient, prefix string, opts Options) (*Store, error) {
	if !ValidPrefix(prefix) {
		return nil, fmt.Errorf("lease: key prefix %q: use letters, digits and . _ - : only", prefix)
	}
	b := &redisBackend{c: c, k: keys{prefix: prefix}}
	s := newStore(b, opts)
	b.opts = &s.opts
	return s, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func fromMS(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func tickMS(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func (b *redisBackend) acquire(ctx context.Context, holder string, reqs []acquireArg) ([]acquireReply, error) {
	ks := make([]string, 0, 3+3*len(reqs))
	ks = append(ks, b.k.epoch(), b.k.due(), b.k.dueInfo())
	argv := make([]any, 0, 3+7*len(reqs))
	argv = append(argv, ms(b.opts.MaxTTL), ms(b.opts.StateTTL), holder)
	var skipped []int
	for i, a := range reqs {
		if a.token == "" { // rejected before sending
			skipped = append(skipped, i)
			continue
		}
		ks = append(ks, b.k.lease(a.member), b.k.state(a.member), b.k.followUp(a.member))
		tick := "0"
		if a.req.Reason == ReasonTick {
			tick = tickMS(a.req.Tick)
		}
		queue, m, claim := "0", a.member, ""
		if a.req.Queue {
			queue = "1"
		}
		if a.req.From != nil {
			claim = a.req.From.claim
		}
		argv = append(argv, a.token, ms(a.req.TTL), string(a.req.Reason), tick, queue, m, claim)
	}
	out := make([]acquireReply, len(reqs))
	if len(ks) == 3 {
		return out, nil
	}
	res, err := scriptAcquire.Run(ctx, b.c, ks, argv...).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(reqs)-len(skipped) {
		return nil, fmt.Errorf("lease: acquire reply has %d entries for %d requests", len(res), len(reqs)-len(skipped))
	}
	j := 0
	for i := range reqs {
		if len(skipped) > 0 && skipped[0] == i {
			skipped = skipped[1:]
			continue
		}
		out[i] = parseAcquireReply(res[j])
		j++
	}
	return out, nil
}

// parseAcquireReply decodes one entity's answer of acquire.lua: a fence
// (granted), or "status|fields…".
func parseAcquireReply(v string) acquireReply {
	status, rest, _ := strings.Cut(v, "|")
	if fence, err := strconv.ParseInt(status, 10, 64); err == nil {
		return acquireReply{status: "ok", fence: fence}
	}
	r := acquireReply{status: status}
	switch status {
	case "busy": // since|fence|holder (the holder last: it may hold '|')
		if f, ok := splitN(rest, 3); ok {
			r.at = fromMS(f[0])
			r.fence, _ = strconv.ParseInt(f[1], 10, 64)
			r.holder = f[2]
		}
	case "ran":
		r.at = fromMS(rest)
	case "quarantine", "early":
		n, _ := strconv.ParseInt(rest, 10, 64)
		r.left = time.Duration(n) * time.Millisecond
	}
	return r
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

func (b *redisBackend) renew(ctx context.Context, ls []*Lease) ([]bool, error) {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(ls))
	for i, l := range ls {
		cmds[i] = scriptRenew.EvalSha(ctx, pipe, []string{b.k.lease(l.member)}, l.token, ms(l.ttl))
	}
	if _, err := pipe.Exec(ctx); err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, err
	}
	// A restarted Redis forgot the script: load it and run the round again.
	if redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT") {
		if err := scriptRenew.Load(ctx, b.c).Err(); err != nil {
			return nil, err
		}
		return b.renew(ctx, ls)
	}
	ok := make([]bool, len(ls))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return nil, err
		}
		ok[i] = n == 1
	}
	return ok, nil
}

func (b *redisBackend) release(ctx context.Context, rs []releaseArg) ([]releaseReply, error) {
	ks := make([]string, 0, 2+3*len(rs))
	ks = append(ks, b.k.due(), b.k.dueInfo())
	argv := make([]any, 0, 1+6*len(rs))
	argv = append(argv, ms(b.opts.StateTTL))
	for _, r := range rs {
		l := r.l
		next := ""
		if r.next != nil {
			next = string(r.next.Reason) + "|" + ms(r.next.Delay) + "|" + strconv.Itoa(r.next.Attempt)
		}
		// outcome|start|end|fence|reason|replica: the last run, for status.
		last := r.o.Result + "|" + tickMS(r.o.Started) + "|" + tickMS(r.o.Ended) + "|" +
			strconv.FormatInt(l.Fence, 10) + "|" + string(l.Reason) + "|" + b.opts.Replica
		ks = append(ks, b.k.lease(l.member), b.k.last(l.member), b.k.followUp(l.member))
		argv = append(argv, l.token, last, l.member, l.claim, tickMS(l.Tick), next)
	}
	res, err := scriptRelease.Run(ctx, b.c, ks, argv...).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(rs) {
		return nil, fmt.Errorf("lease: release reply has %d entries for %d leases", len(res), len(rs))
	}
	out := make([]releaseReply, len(rs))
	for i, v := range res {
		switch v {
		case "notheld":
			out[i].err = ErrNotHeld
		case "fu":
			out[i].followUp = true
		}
	}
	return out, nil
}

func (b *redisBackend) enqueue(ctx context.Context, d Due, delay time.Duration) error {
	return scriptEnqueue.Run(ctx, b.c, []string{b.k.due(), b.k.dueInfo()},
		member(d.Task, d.Entity), string(d.Reason), ms(delay), strconv.Itoa(d.Attempt), tickMS(d.Tick)).Err()
}

func (b *redisBackend) take(ctx context.Context, limit int, vis time.Duration, prefix string) ([]Due, error) {
	res, err := scriptTake.Run(ctx, b.c, []string{b.k.due(), b.k.dueInfo()}, limit, ms(vis), prefix).Slice()
	if err != nil {
		return nil, err
	}
	var out []Due
	for i := 0; i+2 < len(res); i += 3 {
		d, err := parseDue(str(res[i]), str(res[i+1]), str(res[i+2]))
		if err != nil {
			continue // not ours to understand; it stays and expires by visibility
		}
		out = append(out, d)
	}
	return out, nil
}

// parseDue decodes a due member and its "reason|attempt|tick_ms|claim" info.
func parseDue(m, info, score string) (Due, error) {
	task, entity, err := splitMember(m)
	if err != nil {
		return Due{}, err
	}
	f := strings.SplitN(info, "|", 4)
	if len(f) != 4 {
		return Due{}, fmt.Errorf("lease: bad due info %q", info)
	}
	att, _ := strconv.Atoi(f[1])
	sc, _ := strconv.ParseFloat(score, 64)
	return Due{Task: task, Entity: entity, Reason: Reason(f[0]), Attempt: att, Tick: fromMS(f[2]),
		At: time.UnixMilli(int64(sc)), claim: f[3]}, nil
}

func (b *redisBackend) ack(ctx context.Context, d Due) error {
	return scriptAck.Run(ctx, b.c, []string{b.k.due(), b.k.dueInfo()}, member(d.Task, d.Entity), d.claim).Err()
}

func (b *redisBackend) unlock(ctx context.Context, task, entity, by string) (Held, bool, error) {
	m := member(task, entity)
	res, err := scriptUnlock.Run(ctx, b.c, []string{b.k.lease(m), b.k.unlocked(m)}, by, ms(b.opts.StateTTL)).Slice()
	if err != nil || len(res) < 3 {
		return Held{}, false, err
	}
	f, _ := strconv.ParseInt(str(res[2]), 10, 64)
	return Held{Task: task, Entity: entity, Holder: str(res[0]), Since: fromMS(str(res[1])), Fence: f}, true, nil
}

// scan walks the keys matching pattern a page at a time.
func (b *redisBackend) scan(ctx context.Context, pattern string, fn func(keys []string) error) error {
	var cursor uint64
	for {
		ks, next, err := b.c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return fmt.Errorf("scan %s: %w", pattern, err)
		}
		if len(ks) > 0 {
			if err := fn(ks); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// splitN splits a packed value into n fields; the last one keeps any '|'.
func splitN(v string, n int) ([]string, bool) {
	f := strings.SplitN(v, "|", n)
	return f, len(f) == n
}

func (b *redisBackend) leases(ctx context.Context, task string, fn func(Held) error) error {
	return b.scan(ctx, b.k.leasePattern(task), func(ks []string) error {
		pipe := b.c.Pipeline()
		gets := make([]*redis.StringCmd, len(ks))
		ttls := make([]*redis.DurationCmd, len(ks))
		for i, k := range ks {
			gets[i] = pipe.Get(ctx, k)
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, k := range ks {
			m, ok := b.k.memberOf(k)
			// token|since|fence|reason|tick|holder
			f, ok2 := splitN(gets[i].Val(), 6)
			if !ok || !ok2 {
				continue // expired between SCAN and GET
			}
			t, e, err := splitMember(m)
			if err != nil {
				continue
			}
			fence, _ := strconv.ParseInt(f[2], 10, 64)
			h := Held{Task: t, Entity: e, Holder: f[5], Since: fromMS(f[1]), Fence: fence,
				Reason: Reason(f[3]), TTL: ttls[i].Val()}
			if err := fn(h); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *redisBackend) lastRuns(ctx context.Context, task string, fn func(LastRun) error) error {
	return b.scan(ctx, b.k.lastPattern(task), func(ks []string) error {
		pipe := b.c.Pipeline()
		gets := make([]*redis.StringCmd, len(ks))
		states := make([]*redis.StringCmd, len(ks))
		ms := make([]string, len(ks))
		for i, k := range ks {
			ms[i], _ = b.k.memberOf(k)
			gets[i] = pipe.Get(ctx, k)
			states[i] = pipe.Get(ctx, b.k.state(ms[i]))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i := range ks {
			// outcome|start|end|fence|reason|replica
			f, ok := splitN(gets[i].Val(), 6)
			if !ok {
				continue
			}
			t, e, err := splitMember(ms[i])
			if err != nil {
				continue
			}
			fence, _ := strconv.ParseInt(f[3], 10, 64)
			r := LastRun{Task: t, Entity: e, Outcome: f[0], Started: fromMS(f[1]), Ended: fromMS(f[2]),
				Fence: fence, Reason: Reason(f[4]), Replica: f[5]}
			if st, ok := splitN(states[i].Val(), 2); ok {
				r.LastTick = fromMS(st[0])
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *redisBackend) dueEntries(ctx context.Context, fn func(Due) error) error {
	const page = 1000
	for off := int64(0); ; off += page {
		zs, err := b.c.ZRangeWithScores(ctx, b.k.due(), off, off+page-1).Result()
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
		infos, err := b.c.HMGet(ctx, b.k.dueInfo(), ms...).Result()
		if err != nil {
			return err
		}
		for i, z := range zs {
			d, err := parseDue(ms[i], str(infos[i]), strconv.FormatFloat(z.Score, 'f', 0, 64))
			if err != nil {
				continue
			}
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(zs) < page {
			return nil
		}
	}
}

func (b *redisBackend) one(ctx context.Context, task, entity string) (EntityState, error) {
	m := member(task, entity)
	pipe := b.c.Pipeline()
	lg, lt, rg, sg := pipe.Get(ctx, b.k.lease(m)), pipe.PTTL(ctx, b.k.lease(m)), pipe.Get(ctx, b.k.last(m)), pipe.Get(ctx, b.k.state(m))
	ds, di := pipe.ZScore(ctx, b.k.due(), m), pipe.HGet(ctx, b.k.dueInfo(), m)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return EntityState{}, err
	}
	var st EntityState
	if f, ok := splitN(lg.Val(), 6); ok {
		fence, _ := strconv.ParseInt(f[2], 10, 64)
		st.Held = &Held{Task: task, Entity: entity, Holder: f[5], Since: fromMS(f[1]), Fence: fence, Reason: Reason(f[3]), TTL: lt.Val()}
	}
	if g, ok := splitN(rg.Val(), 6); ok {
		fence, _ := strconv.ParseInt(g[3], 10, 64)
		st.Last = &LastRun{Task: task, Entity: entity, Outcome: g[0], Started: fromMS(g[1]), Ended: fromMS(g[2]), Fence: fence, Reason: Reason(g[4]), Replica: g[5]}
		if s, ok := splitN(sg.Val(), 2); ok {
			st.Last.LastTick = fromMS(s[0])
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
	n, err := b.c.ZCard(ctx, b.k.due()).Result()
	return int(n), err
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

// InitEpoch declares that this Redis holds no lease any process could still
// trust, so the data-loss quarantine does not apply to it. Use it only on a
// Redis that is new to tickd (tests, a fresh deployment); after a real data
// loss, let the quarantine run its course.
func (s *Store) InitEpoch(ctx context.Context) error {
	b, ok := s.b.(*redisBackend)
	if !ok {
		return nil
	}
	return b.c.SetNX(ctx, b.k.epoch(), "0|0", 0).Err()
}
