package redisdriver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/internal/codec"
	"github.com/tickd/tickd/lease/driver"
)

// The script runners, named by what fails when:
//   - evalBatch (evalBatchOn on one node, evalBatchByShard on a Cluster):
//     the calls go in one pipeline, ending with a WAIT when writes must be
//     acknowledged; an error fails the whole batch. Acquire, renew, release,
//     enqueue and take use them, through runGroups and runEach.
//   - evalEach: one pipeline, each call keeps its own answer or error, so on
//     a Cluster a shard that does not answer fails only its own calls (the
//     loss watch, status reads).
//   - evalEachAlone: each call on its own, after a batch failed: the calls
//     of the shards that answer still count (take).

// scriptCall is one call of a script.
type scriptCall struct {
	keys []string
	args []any
}

// runGroups runs one call per group (calls[g] for gs[g]) in one round trip
// and returns the replies in batch order: reply i answers the request at
// position i, out of n. Each call must answer one element per request. With
// ackWithin > 0, the round trip also waits that long for the replicas; a
// shortfall returns the replies with an *AckError. A call that failed
// while others did not (on a Cluster, a master that does not answer, or a
// shard that refuses) fails only its own requests: errs[i] is the error of
// request i, and the others' answers stand (a grant is never lost to
// another call's failure). When every call failed, the error is returned.
func runGroups[K comparable](ctx context.Context, b *redisDriver, sc *redis.Script, gs []codec.Group[K], calls []scriptCall, n int, ackWithin time.Duration) (out []string, errs []error, err error) {
	out = make([]string, n)
	if len(calls) == 0 {
		return out, nil, nil
	}
	res, callErrs, err := b.runEach(ctx, sc, calls, ackWithin)
	if res == nil {
		return nil, nil, err
	}
	for g, gr := range gs {
		if callErrs != nil && callErrs[g] != nil {
			if errs == nil {
				errs = make([]error, n)
			}
			for _, i := range gr.Idx {
				errs[i] = callErrs[g]
			}
			continue
		}
		if len(res[g]) != len(gr.Idx) {
			return nil, nil, fmt.Errorf("lease: script reply has %d entries for %d requests", len(res[g]), len(gr.Idx))
		}
		for k, i := range gr.Idx {
			out[i] = res[g][k]
		}
	}
	return out, errs, err
}

// runEach runs one call of sc per group in one round trip and returns each
// call's answers (the scripts join them with spaces: lib.lua's reply), or
// its error in errs (nil when none failed). When every call failed, it
// returns no answers and the error.
func (b *redisDriver) runEach(ctx context.Context, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) (out [][]string, errs []error, err error) {
	if len(calls) == 1 && (ackWithin <= 0 || b.acks == nil) { // Run loads the script itself when needed
		r, err := sc.Run(ctx, b.c, calls[0].keys, calls[0].args...).Text()
		if err != nil {
			return nil, nil, err
		}
		return [][]string{splitReply(r)}, nil, nil
	}
	cmds, err := b.evalBatch(ctx, sc, calls, ackWithin)
	if cmds == nil {
		return nil, nil, err
	}
	out = make([][]string, len(calls))
	failed := 0
	for i, c := range cmds {
		r, cerr := c.Text()
		if cerr != nil {
			if errs == nil {
				errs = make([]error, len(calls))
			}
			errs[i] = cerr
			failed++
			continue
		}
		out[i] = splitReply(r)
	}
	if failed == len(cmds) {
		return nil, nil, errs[0]
	}
	return out, errs, err
}

// evalBatch runs the calls of sc in one pipeline. A Redis that restarted, or a
// primary new after a failover, has not got the script: it is loaded and
// the pipeline sent again.
//
// With ackWithin > 0 (and acknowledgement on) the pipeline ends with a WAIT
// on the same connection (acker.queue): one per batch, not per lease. If
// the replicas fall short, the commands come back with an *AckError: the
// writes happened on the primary but must not be trusted.
func (b *redisDriver) evalBatch(ctx context.Context, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	if ackWithin <= 0 || b.acks == nil {
		// Each call keeps its own answer: on a Cluster, a master that
		// lacks the script, does not answer or refuses fails only its own.
		return evalEach(ctx, b.c, sc, calls), nil
	}
	if cc, ok := b.c.(*redis.ClusterClient); ok { // a Cluster pipeline spans shards: a WAIT per shard
		return b.evalBatchByShard(ctx, cc, sc, calls, ackWithin)
	}
	return evalBatchOn(ctx, b.c, b.acks, sc, calls, ackWithin)
}

// evalBatchOn runs calls in one pipeline on c, ending with acks' WAIT when acks
// is given (c is then one node: the WAIT must run on the connection of the
// writes).
func evalBatchOn(ctx context.Context, c RedisClient, acks *acker, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
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
		var refused redis.Error
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"): // every call's: one script, one node
			if err := sc.Load(ctx, c).Err(); err != nil {
				return nil, err
			}
			return evalBatchOn(ctx, c, acks, sc, calls, ackWithin)
		case !errors.As(err, &refused):
			return nil, err
		}
		// One call's own refusal (a shard's layout changed): the others
		// ran, and each command keeps its own answer. Before, the batch
		// failed whole, and the grants the others made were asked for again
		// and found busy, held by no run until their TTL.
	}
	return cmds, round.check(ctx, c)
}

// evalBatchByShard runs calls on a Redis Cluster with acknowledgement per shard:
// the calls of each master in one pipeline on that master, with its own
// WAIT (and, under AcksAuto, its own count of replicas), the masters in
// parallel. A shard that falls short fails the whole batch with its
// *AckError (the grants of the others are handed back too: safe, and
// rare). A master that does not answer fails only its own calls: the
// others' answers stand, so that no grant is dropped while a failover
// goes on. A call routed to a master that no longer serves its slot (a
// failover, a resharding) makes the client reload the slot map, and those
// calls are sent once more.
func (b *redisDriver) evalBatchByShard(ctx context.Context, cc *redis.ClusterClient, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	cmds, err := b.evalBatchByShardOnce(ctx, cc, sc, calls, ackWithin)
	if cmds == nil || err != nil {
		return cmds, err
	}
	var moved []int
	failed := false
	for i, c := range cmds {
		if c.Err() != nil {
			failed = true
			if redis.HasErrorPrefix(c.Err(), "MOVED") {
				moved = append(moved, i)
			}
		}
	}
	if failed { // a master that moved or died: the client's slot map is reloaded
		cc.ReloadState(ctx)
	}
	if len(moved) == 0 {
		return cmds, nil
	}
	sub := make([]scriptCall, len(moved))
	for k, i := range moved {
		sub[k] = calls[i]
	}
	again, err := b.evalBatchByShardOnce(ctx, cc, sc, sub, ackWithin)
	for k, i := range moved {
		if again != nil {
			cmds[i] = again[k]
		}
	}
	return cmds, err
}

// evalBatchByShardOnce sends calls to their masters once. A master that
// does not answer leaves its error in each of its calls' commands.
func (b *redisDriver) evalBatchByShardOnce(ctx context.Context, cc *redis.ClusterClient, sc *redis.Script, calls []scriptCall, ackWithin time.Duration) ([]*redis.Cmd, error) {
	byNode := map[*redis.Client][]int{}
	for i, call := range calls {
		node, err := cc.MasterForKey(ctx, call.keys[0])
		if err != nil {
			return nil, err
		}
		byNode[node] = append(byNode[node], i)
	}
	cmds := make([]*redis.Cmd, len(calls))
	var ackErr error
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
			got, err := evalBatchOn(ctx, node, b.ackerFor(node.Options().Addr), sc, sub, ackWithin)
			mu.Lock()
			defer mu.Unlock()
			var short *driver.AckError
			if errors.As(err, &short) {
				ackErr = err
			} else if err != nil {
				got = nil // no answer from this master: its calls fail with its error
			}
			for k, i := range idx {
				if got != nil {
					cmds[i] = got[k]
					continue
				}
				cmds[i] = redis.NewCmd(ctx)
				cmds[i].SetErr(err)
			}
		}()
	}
	wg.Wait()
	return cmds, ackErr
}

// ackerFor is the acker of one Cluster master: each counts its own
// replicas.
func (b *redisDriver) ackerFor(addr string) *acker {
	if a, ok := b.shardAcks.Load(addr); ok {
		return a.(*acker)
	}
	a, _ := b.shardAcks.LoadOrStore(addr, &acker{mode: b.acks.mode})
	return a.(*acker)
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

// evalEachAlone runs each call on its own, after a pipeline of them failed: on
// a Cluster, the calls of the shards that answer still count. It fails
// only when every call did.
func (b *redisDriver) evalEachAlone(ctx context.Context, sc *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
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
const maxRepeat = driver.BatchSize
