package redisdriver

import (
	"context"
	"encoding/json"
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
		args[tickTick], args[tickReplica], args[tickPart] = strconv.FormatInt(w.Tick.UnixMilli(), 10), partKey(w.Part), encodeTickPart(w.Part.Kept())
		args[tickKeep], args[tickOldest], args[tickExpiry] = max(k.Ticks, 1), strconv.FormatInt(w.Part.Written.Add(-k.Age).UnixMilli(), 10), ms(k.Age+24*time.Hour)
		calls[i] = scriptCall{keys: []string{b.k.ticks(w.Task)}, args: args}
	}
	// Acknowledged, as an enqueue is: a part the replicas lack is written
	// again (over itself) by the writer's retry, to whichever primary then
	// serves, so a failover leaves no record short of a part it was told
	// was written.
	cmds, err := b.evalBatch(ctx, scriptTick(), calls, enqueueWait)
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
	return decodeTickRecords(els), nil
}

// The lists a task keeps beside its tick records, each value a JSON
// object (failureRecord, actionRecord).
const (
	listFailures = "failures"
	listActions  = "actions"
)

// failureRecord is a driver.Failure as its list keeps it.
type failureRecord struct {
	Task    string         `json:"task"`
	Entity  string         `json:"entity"`
	Tick    time.Time      `json:"tick"`
	Reason  driver.Reason  `json:"reason"`
	Fence   int64          `json:"fence"`
	Replica string         `json:"replica"`
	Started time.Time      `json:"started_at"`
	Ended   time.Time      `json:"ended_at"`
	Outcome driver.Outcome `json:"outcome"`
	Error   string         `json:"error"`
	Output  string         `json:"output"`
}

// actionRecord is a driver.Action as its list keeps it.
type actionRecord struct {
	Task     string            `json:"task"`
	At       time.Time         `json:"at"`
	By       string            `json:"by"`
	What     driver.ActionKind `json:"action"`
	Entities []string          `json:"entities"`
	Reason   string            `json:"reason"`
	Until    time.Time         `json:"until"`
	Detail   string            `json:"detail"`
}

// Push sends one LPUSH and one LTRIM per list, in one pipeline (on a
// Cluster, go-redis splits it by shard).
func (b *redisDriver) Push(ctx context.Context, ps []driver.ListPush) error {
	pipe := b.c.Pipeline()
	for _, p := range ps {
		fs := make([]any, len(p.Failures))
		for i, f := range p.Failures {
			fs[i] = jsonValue(failureRecord(f))
		}
		as := make([]any, len(p.Actions))
		for i, a := range p.Actions {
			as[i] = jsonValue(actionRecord(a))
		}
		for _, l := range []struct {
			name string
			vals []any
			keep int
		}{{listFailures, fs, p.Keep.Failures}, {listActions, as, p.Keep.Actions}} {
			if len(l.vals) > 0 {
				key := b.k.list(p.Task, l.name)
				pipe.LPush(ctx, key, l.vals...)
				pipe.LTrim(ctx, key, 0, int64(max(l.keep, 1))-1)
			}
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// jsonValue is v in JSON: a list's value.
func jsonValue(v any) string {
	data, _ := json.Marshal(v) //nolint:errcheck // plain structs of strings, times and numbers
	return string(data)
}

func (b *redisDriver) Failures(ctx context.Context, task string, limit int) ([]driver.Failure, error) {
	vals, err := b.c.LRange(ctx, b.k.list(task, listFailures), 0, int64(limit)-1).Result()
	return decodeList(vals, func(r failureRecord) driver.Failure { return driver.Failure(r) }), err
}

func (b *redisDriver) Actions(ctx context.Context, task string, limit int) ([]driver.Action, error) {
	vals, err := b.c.LRange(ctx, b.k.list(task, listActions), 0, int64(limit)-1).Result()
	return decodeList(vals, func(r actionRecord) driver.Action { return driver.Action(r) }), err
}

// decodeList decodes a list's JSON values, leaving out any it cannot read
// (another version's).
func decodeList[R, T any](vals []string, as func(R) T) []T {
	out := make([]T, 0, len(vals))
	for _, v := range vals {
		var r R
		if json.Unmarshal([]byte(v), &r) == nil {
			out = append(out, as(r))
		}
	}
	return out
}

// Histories sends every read's two LRANGEs in one pipeline (on a Cluster,
// go-redis splits it by shard).
func (b *redisDriver) Histories(ctx context.Context, reads []driver.HistoryRead) (ticks [][]driver.TickRecord, actions [][]driver.Action, err error) {
	pipe := b.c.Pipeline()
	tc := make([]*redis.StringSliceCmd, len(reads))
	ac := make([]*redis.StringSliceCmd, len(reads))
	for i, r := range reads {
		tc[i] = pipe.LRange(ctx, b.k.ticks(r.Task), 0, int64(r.Ticks)-1)
		ac[i] = pipe.LRange(ctx, b.k.list(r.Task, listActions), 0, int64(r.Actions)-1)
	}
	if len(reads) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, err
		}
	}
	ticks, actions = make([][]driver.TickRecord, len(reads)), make([][]driver.Action, len(reads))
	for i := range reads {
		ticks[i] = decodeTickRecords(tc[i].Val())
		actions[i] = decodeList(ac[i].Val(), func(r actionRecord) driver.Action { return driver.Action(r) })
	}
	return ticks, actions, nil
}
