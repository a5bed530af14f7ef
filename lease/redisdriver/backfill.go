package redisdriver

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/lease/driver"
)

// backfillRecord is a driver.Backfill as the backfills' hash keeps it, in
// JSON; its holder and cancel are fields of their own (backfill.lua).
type backfillRecord struct {
	ID       string      `json:"id"`
	Task     string      `json:"task"`
	From     time.Time   `json:"from"`
	To       time.Time   `json:"to"`
	Entities []string    `json:"entities,omitempty"`
	Unknown  []time.Time `json:"unknown,omitempty"`
	Total    int         `json:"total"`
	Only     string      `json:"only,omitempty"`
	By       string      `json:"by"`
	Created  time.Time   `json:"created"`
	Cursor   time.Time   `json:"cursor"`
	Ticks    int         `json:"ticks"`
	Ran      int64       `json:"ran"`
	Skipped  int64       `json:"skipped"`
	Busy     int64       `json:"busy"`
	Failed   int64       `json:"failed"`
	Ended    time.Time   `json:"ended"`
}

// The fields beside a backfill's own, by the suffix of its id.
const (
	backfillHolder    = "|h" // holder|until (ms)
	backfillCancelled = "|c" // who cancelled it
)

func (b *redisDriver) SaveBackfill(ctx context.Context, bf driver.Backfill, hold time.Duration) (bool, error) {
	rec := backfillRecord{ID: bf.ID, Task: bf.Task, From: bf.From, To: bf.To, Entities: bf.Entities, Unknown: bf.Unknown, Total: bf.Total, Only: bf.Only, By: bf.By, Created: bf.Created,
		Cursor: bf.Cursor, Ticks: bf.Ticks, Ran: bf.Ran, Skipped: bf.Skipped, Busy: bf.Busy, Failed: bf.Failed, Ended: bf.Ended}
	n, err := scriptBackfill().Run(ctx, b.c, []string{b.k.backfills()}, bf.ID, jsonValue(rec), b.cfg.Holder, ms(hold)).Int()
	return n == 1, err
}

func (b *redisDriver) CancelBackfill(ctx context.Context, id, by string) (bool, error) {
	n, err := scriptBackfill().Run(ctx, b.c, []string{b.k.backfills()}, id, "", by, 0).Int()
	return n == 1, err
}

// Backfills reads the hash whole, and deletes the fields of the backfills
// that ended more than driver.BackfillKept ago.
func (b *redisDriver) Backfills(ctx context.Context) ([]driver.Backfill, error) {
	all, err := b.c.HGetAll(ctx, b.k.backfills()).Result()
	if err != nil {
		return nil, err
	}
	var out []driver.Backfill
	var old []string
	for id, v := range all {
		if strings.Contains(id, "|") {
			continue
		}
		var r backfillRecord
		if json.Unmarshal([]byte(v), &r) != nil {
			continue // another version's
		}
		bf := driver.Backfill{ID: id, Task: r.Task, From: r.From, To: r.To, Entities: r.Entities, Unknown: r.Unknown, Total: r.Total, Only: r.Only, By: r.By, Created: r.Created,
			Cursor: r.Cursor, Ticks: r.Ticks, Ran: r.Ran, Skipped: r.Skipped, Busy: r.Busy, Failed: r.Failed, Ended: r.Ended, Cancelled: all[id+backfillCancelled]}
		if h, ok := all[id+backfillHolder]; ok {
			if i := strings.LastIndexByte(h, '|'); i >= 0 {
				until, _ := strconv.ParseInt(h[i+1:], 10, 64) //nolint:errcheck // written by backfill.lua: digits
				bf.Holder, bf.Until = h[:i], time.UnixMilli(until)
			}
		}
		if !bf.Ended.IsZero() && time.Since(bf.Ended) > driver.BackfillKept {
			old = append(old, id, id+backfillHolder, id+backfillCancelled)
			continue
		}
		out = append(out, bf)
	}
	if len(old) > 0 {
		err = b.c.HDel(ctx, b.k.backfills(), old...).Err()
	}
	return out, err
}

// RunRecord reads the entities' numbers once, then each tick's bitmap.
func (b *redisDriver) RunRecord(ctx context.Context, task string, ticks []time.Time, entities []string) ([]driver.TickRan, error) {
	pipe := b.c.Pipeline()
	var nums *redis.SliceCmd
	if len(entities) > 0 {
		fields := make([]string, len(entities))
		for i, e := range entities {
			fields[i] = driver.Escape(e)
		}
		nums = pipe.HMGet(ctx, b.k.entityNumbers(task), fields...)
	}
	layout := pipe.Get(ctx, b.k.shards(task))
	epoch := pipe.Get(ctx, b.k.epoch(bucketOf(task)))
	bitmaps, failed := make([]*redis.StringCmd, len(ticks)), make([]*redis.StringCmd, len(ticks))
	fans := make([]*redis.IntCmd, len(ticks))
	for i, T := range ticks {
		ms := tickMS(T)
		bitmaps[i] = pipe.Get(ctx, b.k.ran(task, ms))
		failed[i] = pipe.Get(ctx, b.k.ranOf(task, ms, driver.BackfillFailed))
		fans[i] = pipe.GetBit(ctx, b.k.fanned(task, ms), T.UnixMilli()%86_400_000/1000)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	ix := make([]int64, len(entities)) // 0: not numbered, so never ran
	if nums != nil {
		for i, v := range nums.Val() {
			if s, ok := v.(string); ok {
				ix[i], _ = strconv.ParseInt(s, 10, 64) //nolint:errcheck // written by acquire.lua: digits
			}
		}
	}
	_, gen := splitGen(layout.Val()) // a reshard's generation: Redis ms at its start
	// The bucket's data loss, ms: acquire.lua refuses a tick before it.
	// An epoch missing is a loss not found yet (or a Redis new to tickd):
	// the next grant finds it, and refuses every tick before it.
	var lost int64 = math.MaxInt64
	if ep, err := decodeEpoch(epoch.Val()); err == nil {
		lost = ep.LostAt
	}
	out := make([]driver.TickRan, len(ticks))
	for i, m := range bitmaps {
		out[i].Fanned = fans[i].Val() == 1
		if out[i].Forgotten = ticks[i].UnixMilli() < max(gen, lost); out[i].Forgotten {
			continue
		}
		bits := []byte(m.Val())
		if !bitSet(bits, 0) {
			continue
		}
		out[i].Kept, out[i].Ran = true, make([]bool, len(entities))
		fbits := []byte(failed[i].Val())
		for j, n := range ix {
			out[i].Ran[j] = n > 0 && bitSet(bits, n)
			if n > 0 && bitSet(fbits, n) {
				if out[i].Failed == nil {
					out[i].Failed = make([]bool, len(entities))
				}
				out[i].Failed[j] = true
			}
		}
	}
	return out, nil
}

// MarkFailed sets (or clears) the entity's bit in the tick's record of
// failed runs (keys.ranOf BackfillFailed), by its number in the run
// record: one that has none never ran under a record, and is left.
func (b *redisDriver) MarkFailed(ctx context.Context, task string, tick time.Time, entity string, failed bool, keep time.Duration) error {
	v, err := b.c.HGet(ctx, b.k.entityNumbers(task), driver.Escape(entity)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case err != nil:
		return err
	}
	bit := 0
	if failed {
		bit = 1
	}
	key := b.k.ranOf(task, tickMS(tick), driver.BackfillFailed)
	pipe := b.c.TxPipeline()
	pipe.Do(ctx, "BITFIELD", key, "SET", "u1", "#"+v, bit)
	pipe.PExpire(ctx, key, keep)
	_, err = pipe.Exec(ctx)
	return err
}

// bitSet reads bit n of a Redis bitmap (the most significant bit of a
// byte first, as BITFIELD u1 numbers them).
func bitSet(bits []byte, n int64) bool {
	return n/8 < int64(len(bits)) && bits[n/8]&(0x80>>(n%8)) != 0
}
