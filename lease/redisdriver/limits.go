package redisdriver

import (
	"context"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// A limit's keys are in one bucket of their own (CRC-32 of its name), under
// prefix:{NN}:~limit:NAME ("~" is in no escaped task name):
//
//	…:holders        zset: each replica with runs under it → until (ms)
//	…:runs:REPLICA   hash: that replica's runs by budget key
//	…:tat:KEY        a budget's rate: its next start's theoretical time (us)
//	…:closed:KEY     a budget an API closed: why, until it expires
//	…:closedset      zset: the budgets closed → until (ms), for status
//
// The bucket's epoch is checked as a lease grant checks it: after a data
// loss, no start is granted for the quarantine.
func (k keys) limitBucket(name string) int {
	return int(crc32.ChecksumIEEE([]byte("~limit:"+name)) % buckets)
}
func (k keys) limit(name string) string {
	return k.bucket(k.limitBucket(name)) + ":~limit:" + driver.Escape(name)
}

// TakeLimit runs limit.lua on the limit's master.
func (b *redisDriver) TakeLimit(ctx context.Context, lim driver.Limit, ttl time.Duration, asks []driver.LimitAsk) ([]driver.LimitGrant, error) {
	holder, maxTTL := b.cfg.Holder, b.cfg.MaxTTL()
	base := b.k.limit(lim.Name)
	ival := lim.Interval()
	args := make([]any, 0, limFixed+limEach*len(asks))
	iv, tol, auto := ival.Microseconds(), (time.Duration(max(lim.Burst, 1)-1) * ival).Microseconds(), 0.0
	if lim.Auto {
		iv, tol, auto = -1, int64(max(lim.Burst, 1)-1), lim.AutoStart
	}
	args = append(args, ms(maxTTL), driver.Escape(holder), ms(ttl), base, lim.Concurrency, iv, tol, flag(lim.Fair), auto)
	for _, a := range asks {
		since := int64(0)
		if !a.Since.IsZero() {
			since = a.Since.UnixMilli()
		}
		group := ""
		if a.Grouped {
			group = "=" + driver.Escape(a.Group)
		}
		args = append(args, a.Key, a.Waiter, since, a.HeadStart.Milliseconds(), group, max(a.Weight, 1))
	}
	r, err := scriptLimit().Run(ctx, b.c, []string{b.k.epoch(b.k.limitBucket(lim.Name)), base + ":holders"}, args...).Text()
	if err != nil {
		return nil, err
	}
	parts := strings.Split(r, " ")
	if len(parts) != len(asks) {
		return nil, fmt.Errorf("limit %s: %d answers for %d starts", lim.Name, len(parts), len(asks))
	}
	out := make([]driver.LimitGrant, len(asks))
	for i, p := range parts {
		if out[i], err = limitGrant(p); err != nil {
			return nil, fmt.Errorf("limit %s: %w", lim.Name, err)
		}
	}
	return out, nil
}

// limitGrant decodes one of limit.lua's answers.
func limitGrant(p string) (driver.LimitGrant, error) {
	kind, rest, _ := strings.Cut(p, ":")
	msOf := func(s string) (time.Duration, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		return time.Duration(max(n, 0)) * time.Millisecond, err
	}
	var g driver.LimitGrant
	var err error
	switch kind {
	case "ok":
		g.OK = true
	case "n":
		g.Why = driver.LimitFull
		g.Wait, err = msOf(rest)
	case "r":
		g.Why = driver.LimitRate
		g.Wait, err = msOf(rest)
	case "q":
		g.Why = driver.LimitQuarantine
		g.Wait, err = msOf(rest)
	case "c":
		left, why, _ := strings.Cut(rest, ":")
		g.Why = driver.LimitClosed
		if g.Wait, err = msOf(left); err == nil {
			g.Reason, err = driver.Unescape(why)
		}
	default:
		err = fmt.Errorf("unexpected answer %q", p)
	}
	return g, err
}

// SetLimitRuns runs settle.lua on the limit's master.
func (b *redisDriver) SetLimitRuns(ctx context.Context, lim driver.Limit, ttl time.Duration, runs map[string]int, giveBack []string) error {
	holder := b.cfg.Holder
	base := b.k.limit(lim.Name)
	args := []any{driver.Escape(holder), ms(ttl), base, lim.Interval().Microseconds(), 0}
	n := 0
	for k, r := range runs {
		if r > 0 {
			args = append(args, k, r)
			n++
		}
	}
	args[setPairs] = n
	for _, k := range giveBack {
		args = append(args, k)
	}
	return scriptSettle().Run(ctx, b.c, []string{base + ":holders"}, args...).Err()
}

// LearnRate runs learn.lua on the limit's master.
func (b *redisDriver) LearnRate(ctx context.Context, lim driver.Limit, key string, seen driver.RateSeen) error {
	return scriptLearn().Run(ctx, b.c, []string{b.k.limit(lim.Name) + ":auto:" + key}, b.k.limit(lim.Name), key, lim.AutoMax, lim.AutoStart,
		seen.Rate, flag(seen.TooMany), seen.Source).Err()
}

// CloseLimit runs close.lua on the limit's master.
func (b *redisDriver) CloseLimit(ctx context.Context, lim driver.Limit, key string, d time.Duration, why string) error {
	base := b.k.limit(lim.Name)
	return scriptClose().Run(ctx, b.c, []string{base + ":closedset"}, base, key, ms(max(d, time.Millisecond)), driver.Escape(why)).Err()
}

// LimitState reads a limit's holders, their runs and the budgets closed,
// in one pipeline and a second for the holders' runs.
func (b *redisDriver) LimitState(ctx context.Context, lim driver.Limit) (driver.LimitState, error) {
	base := b.k.limit(lim.Name)
	st := driver.LimitState{Runs: map[string]map[string]int{}, Closed: map[string]driver.LimitClosing{}}
	now, err := b.c.Time(ctx).Result()
	if err != nil {
		return st, err
	}
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	pipe := b.c.Pipeline()
	hs := pipe.ZRangeByScore(ctx, base+":holders", &redis.ZRangeBy{Min: "(" + nowMs, Max: "+inf"})
	cs := pipe.ZRangeByScoreWithScores(ctx, base+":closedset", &redis.ZRangeBy{Min: "(" + nowMs, Max: "+inf", Count: 1000})
	waiting := pipe.ZCard(ctx, base+":since")
	oldest := pipe.ZRangeWithScores(ctx, base+":since", 0, driver.MaxOldest-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return st, err
	}
	st.Waiting = int(waiting.Val())
	var members []string
	for _, z := range oldest.Val() {
		members = append(members, z.Member.(string))
	}
	for _, c := range cs.Val() {
		key := c.Member.(string)
		st.Closed[key] = driver.LimitClosing{Until: time.UnixMilli(int64(c.Score))}
	}
	pipe = b.c.Pipeline()
	runs := make([]*redis.MapStringStringCmd, len(hs.Val()))
	for i, h := range hs.Val() {
		runs[i] = pipe.HGetAll(ctx, base+":runs:"+h)
	}
	whys := map[string]*redis.StringCmd{}
	for key := range st.Closed {
		whys[key] = pipe.Get(ctx, base+":closed:"+key)
	}
	var deadlines *redis.FloatSliceCmd
	if len(members) > 0 {
		deadlines = pipe.ZMScore(ctx, base+":seen", members...)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return st, err
	}
	for i, z := range oldest.Val() {
		// A run that left the line (its deadline passed) is there until
		// the next ask prunes it: not counted.
		if deadlines != nil && deadlines.Val()[i] != 0 && deadlines.Val()[i] < float64(now.UnixMilli()) {
			st.Waiting--
			continue
		}
		_, w, _ := strings.Cut(members[i], " ")
		st.Oldest = append(st.Oldest, driver.LimitWaiting{Waiter: w, Since: time.UnixMilli(int64(z.Score))})
	}
	holderRuns(&st, hs.Val(), runs)
	for key, c := range whys {
		why, _ := driver.Unescape(c.Val())
		cl := st.Closed[key]
		cl.Reason = why
		st.Closed[key] = cl
	}
	if lim.Auto {
		b.autoState(ctx, base, &st)
	}
	if lim.Fair {
		return st, b.fairState(ctx, base, now, &st)
	}
	return st, nil
}

// holderRuns fills st.Runs from each holder's runs by key.
func holderRuns(st *driver.LimitState, holders []string, runs []*redis.MapStringStringCmd) {
	for i, h := range holders {
		holder, _ := driver.Unescape(h)
		m := map[string]int{}
		for k, v := range runs[i].Val() {
			if n, _ := strconv.Atoi(v); n > 0 {
				m[k] = n
			}
		}
		if len(m) > 0 {
			st.Runs[holder] = m
		}
	}
}

// autoState reads an auto limit's rate learned for its one budget (key
// ""): learn.lua's base:auto: hash. None read is none learned.
func (b *redisDriver) autoState(ctx context.Context, base string, st *driver.LimitState) {
	if v, err := b.c.HMGet(ctx, base+":auto:", "rate", "src").Result(); err == nil && v[0] != nil {
		st.Rate, _ = strconv.ParseFloat(v[0].(string), 64)
		st.RateSource, _ = v[1].(string)
	}
}

// fairState reads a fair limit's groups (of its one budget, key ""):
// limit.lua's base:fg:, base:fq::GROUP, base:fw: and base:fs::N keys.
func (b *redisDriver) fairState(ctx context.Context, base string, now time.Time, st *driver.LimitState) error {
	pipe := b.c.Pipeline()
	n := pipe.ZCard(ctx, base+":fg:")
	gs := pipe.ZRange(ctx, base+":fg:", 0, driver.MaxGroups-1)
	ws := pipe.HGetAll(ctx, base+":fw:")
	began := pipe.HGetAll(ctx, base+":fb:")
	bucket := driver.StartsWindow / driver.StartsBuckets
	at := now.UnixMilli() / bucket.Milliseconds()
	starts := make([]*redis.MapStringStringCmd, driver.StartsBuckets+1)
	for i := range starts {
		starts[i] = pipe.HGetAll(ctx, base+":fs::"+strconv.FormatInt(at-int64(i), 10))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return err
	}
	st.GroupsWaiting = int(n.Val())
	pipe = b.c.Pipeline()
	sizes := make([]*redis.IntCmd, len(gs.Val()))
	heads := make([]*redis.ZSliceCmd, len(gs.Val()))
	for i, g := range gs.Val() {
		sizes[i] = pipe.ZCard(ctx, base+":fq::"+g)
		heads[i] = pipe.ZRangeWithScores(ctx, base+":fq::"+g, 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return err
	}
	started := map[string]int{}
	for i, c := range starts {
		for g, v := range c.Val() {
			k, _ := strconv.Atoi(v)
			if i == driver.StartsBuckets { // the oldest bucket, in part
				k = k * int(bucket-time.Duration(now.UnixMilli()%bucket.Milliseconds())*time.Millisecond) / int(bucket)
			}
			started[g] += k
			st.Starts += k
		}
	}
	for i, g := range gs.Val() {
		name, err := driver.Unescape(g)
		if err != nil {
			continue
		}
		w, _ := strconv.Atoi(ws.Val()[g])
		lg := driver.LimitGroup{Name: name, Waiting: int(sizes[i].Val()), Weight: max(w, 1), Started: started[g]}
		if ms, err := strconv.ParseInt(began.Val()[g], 10, 64); err == nil {
			lg.Since = time.UnixMilli(ms)
		}
		if h := heads[i].Val(); len(h) > 0 {
			lg.Oldest = time.UnixMilli(int64(h[0].Score))
		}
		st.Groups = append(st.Groups, lg)
	}
	return nil
}
