package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

// ErrLayout is matched by a *LayoutError.
var ErrLayout = errors.New("lease: redis holds tickd keys in another layout")

// LayoutError says which keys of another key layout were found: the store
// grants, enqueues and takes nothing beside them, so that two versions of
// tickd never split the truth between two layouts.
type LayoutError struct {
	Keys  []string // keys only the older layout has
	Other string   // or the layout version a newer tickd wrote
}

func (e *LayoutError) Error() string {
	if e.Other != "" {
		return fmt.Sprintf("%v: layout %s, written by a newer tickd (this one uses layout %s); run the newer version", ErrLayout, e.Other, LayoutVersion)
	}
	return fmt.Sprintf("%v: %s of an older tickd: stop every older tickd on this key prefix, then run `tickd migrate` (docs/operations.md, \"Upgrading\")",
		ErrLayout, strings.Join(e.Keys, ", "))
}

// Is makes errors.Is(err, ErrLayout) true.
func (e *LayoutError) Is(target error) bool { return target == ErrLayout }

// layoutRecheck is how often a driver looks again for keys of an older
// layout (an older tickd started beside this one), unless told otherwise
// (SetLayoutRecheck).
const layoutRecheck = 5 * time.Second

// layoutGate runs the layout check before the first grant, enqueue or take
// of a store, and again every recheck.
type layoutGate struct {
	mu      sync.Mutex
	checked time.Time     // last check that passed
	recheck time.Duration // 0: layoutRecheck
}

// SetLayoutRecheck sets how often the driver looks again for keys of an
// older layout: every 5s unless set (tests shorten it).
func (b *redisDriver) SetLayoutRecheck(d time.Duration) {
	b.gate.mu.Lock()
	defer b.gate.mu.Unlock()
	b.gate.recheck = d
}

// ready returns nil once the layout is this one: the first time, it also
// records the layout and gives every bucket an epoch (a bucket without one
// is quarantined, as an acquire would find it), so that a task new to this
// Redis finds its bucket's epoch and is not taken for one whose state was
// lost.
func (b *redisDriver) ready(ctx context.Context) error {
	g := &b.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	recheck := g.recheck
	if recheck <= 0 {
		recheck = layoutRecheck
	}
	if !g.checked.IsZero() && time.Since(g.checked) < recheck {
		return nil
	}
	first := g.checked.IsZero()
	if err := b.CheckLayout(ctx); err != nil {
		var le *LayoutError
		if !first && !errors.As(err, &le) {
			// The layout keys' shard does not answer: what the last check
			// found stands, and the check is made again next time.
			g.checked = time.Now()
			return nil
		}
		return err
	}
	if first {
		if err := b.prepare(ctx); err != nil {
			return err
		}
		// The layout this Redis has now (prepare's, or another's written
		// first) says whether the chunks are kept as records.
		if err := b.CheckLayout(ctx); err != nil {
			return err
		}
	} else {
		b.keepLayoutKey(ctx)
	}
	g.checked = time.Now()
	return nil
}

// CheckLayout returns a *LayoutError when the prefix holds keys of an
// older key layout or names a newer one: what the store reads there would
// not be what the replicas running beside it write.
func (b *redisDriver) CheckLayout(ctx context.Context) error {
	pipe := b.c.Pipeline()
	olds := b.k.oldLayout()
	exists := make([]*redis.IntCmd, len(olds))
	for i, k := range olds { // one key per command: they may live on different shards
		exists[i] = pipe.Exists(ctx, k)
	}
	layout := pipe.Get(ctx, b.k.layout())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	var found []string
	for i, e := range exists {
		if e.Val() > 0 {
			found = append(found, olds[i])
		}
	}
	if len(found) > 0 {
		return &LayoutError{Keys: found}
	}
	switch v := layout.Val(); v {
	case "":
		// None yet, or lost with the data (a restart empty): the driver
		// keeps what it read last (ready writes it back). Were it to
		// forget records while another replica, not yet checked again,
		// kept some, the two would grant one entity each.
	case LayoutVersion:
		b.records.Store(true)
	case layoutNoRecords:
		b.records.Store(false)
	default:
		return &LayoutError{Other: v}
	}
	return nil
}

// keepLayoutKey writes back the layout key when it is gone (a Redis restarted
// empty), as this driver runs: records or not.
func (b *redisDriver) keepLayoutKey(ctx context.Context) {
	v := layoutNoRecords
	if b.records.Load() {
		v = LayoutVersion
	}
	b.c.SetNX(ctx, b.k.layout(), v, 0) //nolint:errcheck // written again at the next check
}

// prepare records the layout and makes sure every bucket has an epoch.
func (b *redisDriver) prepare(ctx context.Context) error {
	if err := b.c.SetNX(ctx, b.k.layout(), LayoutVersion, 0).Err(); err != nil {
		return err
	}
	if _, err := b.evalBatch(ctx, scriptEpoch(), b.epochCalls(b.maxTTL(), nil), 0); err != nil {
		return err
	}
	b.recordSuccessors(ctx, true) // before the first grant: a failover right after it is no restart
	return nil
}

// epochCalls run the epoch script on every bucket: one without an epoch
// gets one, quarantined for maxTTL from now, and so does one that lost a
// grant this driver trusted, or one lost says (its server lost its data).
func (b *redisDriver) epochCalls(maxTTL time.Duration, lost []bool) []scriptCall {
	calls := make([]scriptCall, buckets)
	for bk := range calls {
		calls[bk] = b.epochCall(bk, maxTTL, lost != nil && lost[bk])
	}
	return calls
}

func (b *redisDriver) epochCall(bk int, maxTTL time.Duration, lost bool) scriptCall {
	return scriptCall{keys: []string{b.k.epoch(bk), b.k.dueInfo(bk)}, args: []any{ms(maxTTL), b.seen[bk].Load(), flag(lost)}}
}

// CheckEpochs looks for a data loss once the store is prepared (before
// that, the first grant's prepare gives every bucket its epoch). It runs
// the epoch script on one bucket per server, bucket 0 on a single Redis and
// the first bucket of each master on a Cluster, since a server that lost
// its data, or restarted, lost every bucket it serves: a script or two a
// second, not one per bucket. When a probe finds the loss, the epoch
// script runs on every bucket, quarantining those that lost theirs from now
// (on a Cluster, a shard that does not answer fails only its own buckets).
// It answers the longest quarantine left.
func (b *redisDriver) CheckEpochs(ctx context.Context) (time.Duration, error) {
	b.gate.mu.Lock()
	prepared := !b.gate.checked.IsZero()
	b.gate.mu.Unlock()
	if !prepared {
		return 0, nil
	}
	b.recordSuccessors(ctx, false)
	probes, servers := b.lossProbes(ctx)
	calls := make([]scriptCall, len(probes))
	for i, bk := range probes {
		calls[i] = b.epochCall(bk, b.maxTTL(), false)
	}
	var left time.Duration
	var failed error
	var rolled []int // probes that found a rollback: found by them alone
	found := false
	for i, cmd := range evalEach(ctx, b.c, scriptEpoch(), calls) {
		l, f, err := epochReply(cmd)
		switch {
		case err != nil:
			failed = err
		case f == foundNone:
			left = max(left, l)
		case f == foundRollback:
			rolled = append(rolled, probes[i])
			fallthrough
		default:
			found = true
		}
	}
	if found {
		return b.quarantineLost(ctx, b.maxTTL(), othersOnTheirServers(servers, rolled))
	}
	return left, failed
}

// othersOnTheirServers marks the buckets that share a server (servers, as
// lossProbes lists them) with one of found, found left out.
func othersOnTheirServers(servers [][]int, found []int) []bool {
	lost := make([]bool, buckets)
	for _, bks := range servers {
		if slices.ContainsFunc(bks, func(bk int) bool { return slices.Contains(found, bk) }) {
			for _, bk := range bks {
				lost[bk] = !slices.Contains(found, bk)
			}
		}
	}
	return lost
}

// What the epoch script found: no loss, a loss (every bucket of the server
// finds it), or a rollback past a fence this driver saw (only the buckets
// holding such a fence find it).
const (
	foundNone = iota
	foundLoss
	foundRollback
)

// epochReply reads the epoch script's answer: the quarantine left, and
// what this call found.
func epochReply(cmd *redis.Cmd) (time.Duration, int, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return 0, foundNone, err
	}
	if len(v) != 2 || v[1] < foundNone || v[1] > foundRollback {
		return 0, foundNone, fmt.Errorf("%w: epoch script answered %v", errFormat, v)
	}
	return time.Duration(v[0]) * time.Millisecond, int(v[1]), nil
}

// lossProbes are the buckets checkEpochs reads, one per server, and each
// server's buckets (servers[i] those of probes[i]'s). A server's probe is
// the bucket this driver was granted its highest fence in (or its first):
// a rollback forgets what came after a time, so if it forgot any grant
// this driver trusted there, it forgot that one.
func (b *redisDriver) lossProbes(ctx context.Context) (probes []int, servers [][]int) {
	byAddr := map[string]int{}
	cc, cluster := b.c.(*redis.ClusterClient)
	for bk := range buckets {
		addr := ""
		if cluster {
			node, err := cc.MasterForKey(ctx, b.k.epoch(bk))
			if err != nil {
				addr = fmt.Sprint("bucket ", bk) // no slot map: this bucket is read where it lives
			} else {
				addr = node.Options().Addr
			}
		}
		i, ok := byAddr[addr]
		if !ok {
			i, byAddr[addr] = len(probes), len(probes)
			probes, servers = append(probes, bk), append(servers, nil)
		}
		servers[i] = append(servers[i], bk)
		if b.seen[bk].Load() > b.seen[probes[i]].Load() {
			probes[i] = bk
		}
	}
	return probes, servers
}

// quarantineLost runs the epoch script on every bucket: those whose epoch
// is gone, or that lost a grant this driver trusted, or that lost says
// lost (their server lost its data) are quarantined for maxTTL from now.
// It answers the longest quarantine left.
func (b *redisDriver) quarantineLost(ctx context.Context, maxTTL time.Duration, lost []bool) (time.Duration, error) {
	var left time.Duration
	var failed error
	for _, cmd := range evalEach(ctx, b.c, scriptEpoch(), b.epochCalls(maxTTL, lost)) {
		n, _, err := epochReply(cmd)
		if err != nil {
			failed = err
			continue
		}
		left = max(left, n)
	}
	return left, failed
}

// ErrReplicasRunning is returned when Migrate finds replicas announcing their tasks.
var ErrReplicasRunning = errors.New("lease: tickd replicas are running on this prefix")

// Migrate moves a Redis of layout 2 to this one (layout 3: a tick's chunks
// kept as records, from then on), and the keys of layout 1 (tickd before
// buckets) into this layout on a single Redis or a Sentinel primary
// (layout 1 never ran on a Cluster), keeping everything: each task's hash, the epoch (copied into
// every bucket, so a quarantine under way goes on) and the pending
// requests. Every tickd must be stopped first: replicas of this version
// refuse to run beside the old keys, and Migrate refuses while any replica
// announces its tasks. A Migrate cut short is run again; the old epoch,
// deleted last, is what keeps this version's replicas waiting until then.
func (b *redisDriver) Migrate(ctx context.Context) (driver.Migrated, error) {
	var m driver.Migrated
	if err := b.CheckLayout(ctx); err == nil && b.records.Load() {
		return m, nil // this layout already: nothing to move
	}
	live, err := b.liveReplicas(ctx)
	if err != nil {
		return m, err
	}
	if len(live) > 0 {
		return m, fmt.Errorf("%w (%s): stop every tickd on it first", ErrReplicasRunning, strings.Join(live, ", "))
	}
	old := b.k.oldLayout()
	oldEpoch, oldDue, oldInfo := old[0], old[1], b.k.prefix+":dueinfo"
	ep, err := b.c.Get(ctx, oldEpoch).Result()
	if errors.Is(err, redis.Nil) { // nothing of layout 1: layout 2 (or none) becomes this one
		v, err := b.c.Get(ctx, b.k.layout()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return m, err
		}
		if v == "" || v == layoutNoRecords {
			m.From = v // none: a Redis new to tickd, or that lost its data
			return m, b.c.Set(ctx, b.k.layout(), LayoutVersion, 0).Err()
		}
		return m, nil
	}
	if err != nil {
		return m, err
	}
	pipe := b.c.Pipeline()
	for bk := range buckets {
		pipe.Set(ctx, b.k.epoch(bk), ep, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return m, fmt.Errorf("copy the epoch: %w", err)
	}
	m.From = layoutGlobalKeys
	if m.Tasks, err = b.migrateTasks(ctx); err != nil {
		return m, err
	}
	if m.Due, err = b.migrateDue(ctx, oldDue, oldInfo); err != nil {
		return m, err
	}
	if err := b.c.Del(ctx, oldDue, oldInfo).Err(); err != nil {
		return m, err
	}
	if err := b.c.Set(ctx, b.k.layout(), LayoutVersion, 0).Err(); err != nil {
		return m, err
	}
	return m, b.c.Del(ctx, oldEpoch).Err()
}

// liveReplicas lists the replicas whose announcement is current.
func (b *redisDriver) liveReplicas(ctx context.Context) ([]string, error) {
	rs, err := b.Replicas(ctx)
	live := make([]string, len(rs))
	for i, r := range rs {
		live[i] = r.ID
	}
	return live, err
}

// migrateTasks renames each layout-1 task hash, prefix:{task}:entities,
// into its bucket.
func (b *redisDriver) migrateTasks(ctx context.Context) (int, error) {
	n := 0
	err := b.scan(ctx, b.k.prefix+":{*}:entities", func(k string) error {
		esc, ok := strings.CutSuffix(strings.TrimPrefix(k, b.k.prefix+":{"), "}:entities")
		task, err := driver.Unescape(esc)
		if !ok || strings.ContainsAny(esc, ":{}") || err != nil {
			return nil // this layout's, or not tickd's
		}
		if err := b.c.RenameNX(ctx, k, b.k.entities(task)).Err(); err != nil {
			return fmt.Errorf("move %s: %w", k, err)
		}
		n++
		return nil
	})
	return n, err
}

// migrateDue moves the layout-1 due entries into their buckets, untaken
// (a claim from before is moot: every taker is stopped).
func (b *redisDriver) migrateDue(ctx context.Context, due, info string) (int, error) {
	zs, err := b.c.ZRangeWithScores(ctx, due, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	infos, err := b.c.HGetAll(ctx, info).Result()
	if err != nil {
		return 0, err
	}
	pipe := b.c.Pipeline()
	n := 0
	for _, z := range zs {
		m := z.Member.(string)
		task, _, err := splitMember(m)
		f := strings.SplitN(infos[m], "|", 4) // layout 1: reason|attempt|tick|claim
		if err != nil || len(f) != 4 {
			continue
		}
		attempt, aerr := number(f[1])
		tick, terr := number(f[2])
		if aerr != nil || terr != nil {
			continue
		}
		bk := bucketOf(task)
		pipe.ZAdd(ctx, b.k.due(bk), redis.Z{Score: z.Score, Member: m})
		pipe.HSet(ctx, b.k.dueInfo(bk), m, dueInfo{Reason: driver.Reason(f[0]), Attempt: attempt, Tick: tick}.encode()) // untaken: no claim
		n++
	}
	if n == 0 {
		return 0, nil
	}
	_, err = pipe.Exec(ctx)
	return n, err
}

// InitEpoch gives every bucket an epoch that is not quarantined: this
// Redis holds no lease any process could still trust (lease's
// Store.InitEpoch).
func (b *redisDriver) InitEpoch(ctx context.Context) error {
	pipe := b.c.Pipeline()
	for bk := range buckets {
		pipe.SetNX(ctx, b.k.epoch(bk), epochValue{}.encode(), 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
