package redisdriver

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tickd/tickd/lease/driver"
)

func (b *redisDriver) RecordTicks(ctx context.Context, ws []driver.TickWrite) error {
	calls := make([]scriptCall, len(ws))
	for i, w := range ws {
		k := w.Keep
		args := make([]any, tickFixed)
		args[tickTick], args[tickReplica], args[tickPart] = strconv.FormatInt(w.Tick.UnixMilli(), 10), driver.PartKey(w.Part), driver.EncodeTickPart(w.Part)
		args[tickKeep], args[tickOldest], args[tickExpiry] = max(k.Ticks, 1), strconv.FormatInt(w.Part.Written.Add(-k.Age).UnixMilli(), 10), ms(k.Age+24*time.Hour)
		calls[i] = scriptCall{keys: []string{b.k.ticks(w.Task)}, args: args}
	}
	// Acknowledged, as an enqueue is: a part the replicas lack is written
	// again (over itself) by the writer's retry, to whichever primary then
	// serves, so a failover leaves no record short of a part it was told
	// was written.
	cmds, err := b.evalBatch(ctx, scriptTick, calls, enqueueWait)
	if err != nil {
		return err
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (b *redisDriver) Ticks(ctx context.Context, task string, limit int) ([]driver.TickRecord, error) {
	els, err := b.c.LRange(ctx, b.k.ticks(task), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, err
	}
	return driver.DecodeTickRecords(els), nil
}

// Push sends one LPUSH and one LTRIM per list, in one pipeline (on a
// Cluster, go-redis splits it by shard).
func (b *redisDriver) Push(ctx context.Context, list string, ps []*driver.ListPush) error {
	pipe := b.c.Pipeline()
	for _, p := range ps {
		key := b.k.list(p.Task, list)
		vals := make([]any, len(p.Vals))
		for i, v := range p.Vals {
			vals[i] = v
		}
		pipe.LPush(ctx, key, vals...)
		pipe.LTrim(ctx, key, 0, int64(p.Keep)-1)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (b *redisDriver) List(ctx context.Context, list, task string, limit int) ([]string, error) {
	return b.c.LRange(ctx, b.k.list(task, list), 0, int64(limit)-1).Result()
}

// Histories sends every read's two LRANGEs in one pipeline (on a Cluster,
// go-redis splits it by shard).
func (b *redisDriver) Histories(ctx context.Context, reads []driver.HistoryRead) (ticks [][]driver.TickRecord, actions [][]string, err error) {
	pipe := b.c.Pipeline()
	tc := make([]*redis.StringSliceCmd, len(reads))
	ac := make([]*redis.StringSliceCmd, len(reads))
	for i, r := range reads {
		tc[i] = pipe.LRange(ctx, b.k.ticks(r.Task), 0, int64(r.Ticks)-1)
		ac[i] = pipe.LRange(ctx, b.k.list(r.Task, driver.ListActions), 0, int64(r.Actions)-1)
	}
	if len(reads) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, err
		}
	}
	ticks, actions = make([][]driver.TickRecord, len(reads)), make([][]string, len(reads))
	for i := range reads {
		ticks[i], actions[i] = driver.DecodeTickRecords(tc[i].Val()), ac[i].Val()
	}
	return ticks, actions, nil
}
