package redisdriver

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// AllBucketsEvery is how often a due poll looks at every bucket, not only
// those of the replica's own tasks: only to drop the entries of tasks no
// replica runs (a task's own replicas poll its bucket), so every 50th poll
// (5 s at the daemon's 100 ms) is enough. Every 10th, one replica's 64 reads
// a second were most of what a 1,000,000-entity task's polls cost. With
// several live replicas, each does it every AllBucketsEvery × their number
// of polls (at most 8×), so the fleet does every AllBucketsEvery.
const AllBucketsEvery = 50

// enqueueWait bounds how long a due entry written outside a lease (a
// trigger, a given-back entry) waits for the replicas.
const enqueueWait = ackWaitMax

func (b *redisDriver) Enqueue(ctx context.Context, d driver.Due, delay time.Duration) (time.Time, error) {
	if err := b.ready(ctx); err != nil {
		return time.Time{}, err
	}
	// Acknowledged, so that a trigger said to be stored survives a failover.
	bk := bucketOf(d.Task)
	args := make([]any, enqFixed)
	args[enqMember], args[enqReason], args[enqDelay] = member(d.Task, d.Entity), string(d.Reason), ms(delay)
	args[enqAttempt], args[enqTick], args[enqReqs] = strconv.Itoa(d.Attempt), tickMS(d.Tick), strings.Join(d.Requests, ",")
	args[enqShards] = shardsArg(d.Shards)
	cmds, err := b.evalBatch(ctx, scriptEnqueue(), []scriptCall{{keys: []string{b.k.due(bk), b.k.dueInfo(bk), b.k.shards(d.Task)}, args: args}}, enqueueWait)
	if err == nil && len(cmds) == 1 {
		err = shardsErr(cmds[0].Err())
		if n, ok := cmds[0].Val().(int64); ok && n == 2 && err == nil {
			return time.Time{}, driver.ErrWaiting
		}
		// A string answer is the older tick a waiting run superseded.
		if s, ok := cmds[0].Val().(string); ok && err == nil {
			if n, perr := strconv.ParseInt(s, 10, 64); perr == nil && n > 0 {
				return time.UnixMilli(n).UTC(), nil
			}
		}
	}
	return time.Time{}, shardsErr(err)
}

// requestKeys adds to ks the answer hashes of task's requests ids that it
// does not hold yet: a script finds each among its KEYS by the id.
func (b *redisDriver) requestKeys(ks []string, task string, ids []string) []string {
	for _, id := range ids {
		if k := b.k.request(task, id); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// Take looks, in one round trip, at the earliest entry of the due sets of
// the buckets of the tasks this replica announced (of all 64 every
// AllBucketsEvery polls, and always when it announced none), then takes
// from the buckets where one is due, one script call each, in a second
// round trip. A poll with nothing due costs one cheap read per bucket
// looked at; an entry of a task no announced task shares a bucket with (a
// task this replica does not run) is seen within AllBucketsEvery polls.
// Replicas that run the same tasks share the polls out (sharedSkip).
func (b *redisDriver) Take(ctx context.Context, limit int, vis time.Duration, prefix string) ([]driver.Due, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	rs, err := b.dueBuckets(ctx)
	if err == nil {
		b.found.Store(len(rs) > 0)
	}
	if err != nil || len(rs) == 0 {
		return nil, err
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
		args := make([]any, takeFixed)
		args[takeLimit], args[takeVisibility], args[takeClaim] = n, ms(vis), prefix+"."+strconv.Itoa(r.bk)
		calls[i] = scriptCall{keys: []string{b.k.due(r.bk), b.k.dueInfo(r.bk)}, args: args}
	}
	cmds, err := b.evalBatch(ctx, scriptTake(), calls, 0)
	if err != nil && len(calls) > 1 {
		cmds, err = b.evalEachAlone(ctx, scriptTake(), calls)
	}
	if err != nil {
		return nil, err
	}
	var out []driver.Due
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

// dueBucket is a bucket whose earliest due entry is due, at first.
type dueBucket struct {
	bk    int
	first float64
}

// pollShare is how the live replicas share the due polls (announce.lua
// counts them at each announcement): same replicas announced the tasks
// this one did, live replicas announced at all, each at most
// maxPollShare.
type pollShare struct{ same, live uint64 }

// maxPollShare bounds how far a replica thins out its polls: with more
// replicas than this, each still looks at its buckets every 8th poll.
const maxPollShare = 8

func clampShare(n int64) uint64 { return uint64(min(max(n, 1), maxPollShare)) }

// sharedSkip says whether poll k leaves its buckets to the other replicas.
// The replicas that run the same tasks share their buckets' polls: each
// looks at them one poll in share.same (0.8 s apart at the daemon's 100
// ms with 8), so that together they look as often as one replica alone,
// and the Redis work of the polls does not grow with the replicas. A poll
// after one that found an entry due is never skipped: a backlog is taken
// by every replica at the full rate.
func (b *redisDriver) sharedSkip(k uint64, sh *pollShare) bool {
	return sh != nil && sh.same > 1 && k%sh.same != 0 && !b.found.Load()
}

// dueBuckets reads, in one round trip, the earliest entry of the due sets
// take looks at, and returns the buckets where one is due. A poll the
// replicas share out (sharedSkip) sends nothing.
func (b *redisDriver) dueBuckets(ctx context.Context) ([]dueBucket, error) {
	own, sh, k := b.own.Load(), b.share.Load(), b.polls.Add(1)
	every := uint64(AllBucketsEvery)
	if sh != nil {
		every *= sh.live // the fleet looks at all buckets every AllBucketsEvery polls
	}
	all := own == nil || k%every == 0
	if !all && (b.sharedSkip(k, sh) || b.idleSkip()) {
		return nil, nil
	}
	woken := b.wakeups.Load()
	pipe := b.c.Pipeline()
	firsts := make([]*redis.ZSliceCmd, buckets)
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
	var rs []dueBucket
	next := now + float64(b.idle().Milliseconds())
	for bk, f := range firsts {
		if f == nil {
			continue
		}
		if f.Err() != nil {
			next = now // a shard that did not answer: looked at again next poll
		} else if zs := f.Val(); len(zs) == 1 && zs[0].Score <= now {
			rs = append(rs, dueBucket{bk, zs[0].Score})
		} else if len(zs) == 1 {
			next = min(next, zs[0].Score)
		}
	}
	// The next look, on this replica's clock: a shard whose clock is
	// behind the one read may see its entry due a little later, which the
	// look after that finds. A wake-up heard while this look was under way
	// may be for an entry it did not see: the next poll looks.
	b.nextLook.Store(time.Now().Add(time.Duration(next-now) * time.Millisecond).UnixNano())
	if b.wakeups.Load() != woken { // checked after the store: a later wake-up lowers what it stored
		b.nextLook.Store(0)
	}
	return rs, nil
}

// dueIdle is the longest a due poll that found nothing due waits before it
// looks again: it sleeps until the earliest entry of its buckets is due,
// and an entry that comes before that one wakes it (add_due publishes on
// keys.dueWake, which WatchRevocations hears): a trigger or a run asked
// for now is taken at the next poll, as before, while an idle replica
// looks once a second rather than ten times. A wake-up lost (a
// reconnection) delays an entry by dueIdle at most.
const dueIdle = time.Second

// idle is dueIdle, or the driver's own (a test's).
func (b *redisDriver) idle() time.Duration {
	if b.dueIdle > 0 {
		return b.dueIdle
	}
	return dueIdle
}

// idleSkip says whether a due poll may leave its buckets alone: the last
// one found nothing due, and neither the earliest entry it saw nor a
// wake-up since is due yet. Without wake-ups (a client that cannot
// subscribe) every poll looks.
func (b *redisDriver) idleSkip() bool {
	return b.wakes.Load() && !b.found.Load() && time.Now().UnixNano() < b.nextLook.Load()
}

// wake brings the next due look forward to when an entry added to bucket
// bk is due, delay from now, if the bucket is one this replica polls.
func (b *redisDriver) wake(bk int, delay time.Duration) {
	if own := b.own.Load(); own != nil && bk >= 0 && bk < buckets && !(*own)[bk] {
		return
	}
	b.wakeups.Add(1) // before nextLook: a look under way sees the one or lowers the other
	at := time.Now().Add(delay).UnixNano()
	for {
		cur := b.nextLook.Load()
		if cur <= at || b.nextLook.CompareAndSwap(cur, at) {
			return
		}
	}
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

// parseDue decodes a due member, its info (dueInfo) and its score.
func parseDue(m, info, score string) (driver.Due, error) {
	task, entity, err := splitMember(m)
	if err != nil {
		return driver.Due{}, err
	}
	d, err := decodeDueInfo(info)
	if err != nil {
		return driver.Due{}, err
	}
	sc, _ := strconv.ParseFloat(score, 64)
	return driver.Due{Task: task, Entity: entity, Reason: d.Reason, Attempt: int(d.Attempt), Tick: driver.MSTime(d.Tick),
		At: time.UnixMilli(int64(sc)), Requests: d.Reqs, Claim: d.Claim}, nil
}

func (b *redisDriver) Ack(ctx context.Context, d driver.Due) error {
	bk := bucketOf(d.Task)
	ks := b.requestKeys([]string{b.k.due(bk), b.k.dueInfo(bk)}, d.Task, d.Requests)
	args := make([]any, ackFixed)
	args[ackMember], args[ackClaim] = member(d.Task, d.Entity), d.Claim
	args[ackField], args[ackReqs] = driver.Escape(d.Entity), strings.Join(d.Requests, ",")
	return scriptAck().Run(ctx, b.c, ks, args...).Err()
}

func (b *redisDriver) Answers(ctx context.Context, task, id string) (map[string]driver.Outcome, error) {
	m, err := b.c.HGetAll(ctx, b.k.request(task, id)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]driver.Outcome, len(m))
	for f, v := range m {
		if e, err := driver.Unescape(f); err == nil {
			out[e] = driver.Outcome(v)
		}
	}
	return out, nil
}

func (b *redisDriver) Forget(ctx context.Context, task, id string) error {
	return b.c.Del(ctx, b.k.request(task, id)).Err()
}

// DueEntries walks the due entries of task's bucket (every bucket for ""),
// a page at a time, earliest first within a bucket.
func (b *redisDriver) DueEntries(ctx context.Context, task string, fn func(driver.Due) error) error {
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

func (b *redisDriver) bucketDue(ctx context.Context, bk int, task string, fn func(driver.Due) error) error {
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

func (b *redisDriver) DueCount(ctx context.Context) (int, error) {
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
