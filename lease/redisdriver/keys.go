package redisdriver

import (
	"cmp"
	"hash/crc32"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// buckets is how many hash slots tickd's keys use: each task belongs to one
// bucket (bucketOf), and everything a script touches for a task shares the
// bucket's hash tag, so every script runs on one Redis Cluster shard. The
// number is part of the key layout (LayoutVersion): changing it moves keys.
const buckets = 64

// LayoutVersion names this key layout; prefix:layout holds it. Layout 1
// (tickd before it) kept the epoch and the due set in global keys. Layout
// 2 is this one without the chunks' records (chunks.go), which a tickd of
// layout 2 would not read: this tickd runs on a Redis of layout 2 without
// keeping records, and `tickd migrate` moves it to layout 3 once every
// tickd on it is stopped.
const LayoutVersion = "3"

// layoutGlobalKeys is the layout that kept the epoch and the due set in
// global keys.
const layoutGlobalKeys = "1"

// layoutNoRecords is the layout this tickd runs on without keeping a
// tick's chunks as records.
const layoutNoRecords = "2"

// TaskKey is the key of task's hash under prefix: on a Redis Cluster, its
// slot is the slot of everything tickd keeps for the task.
func TaskKey(prefix, task string) string { return keys{prefix}.entities(task) }

// bucketOf is task's bucket: CRC-32 (IEEE) of its name, modulo buckets.
// Shard s > 0 of a task (driver.ShardName) is in another bucket, each in
// its own: the buckets in the order of their hash slots, from the task's,
// s places on with s's 6 bits reversed (0, 32, 16, 48, 8…). However many
// shards a task has, they are spread evenly over the slots, so over
// masters that own equal ranges of them (a Cluster as created).
func bucketOf(task string) int {
	t, s := driver.SplitShard(task)
	b := int(crc32.ChecksumIEEE([]byte(t)) % buckets)
	if s == 0 {
		return b
	}
	return bySlot[(slotRank[b]+int(bits.Reverse8(uint8(s))>>2))%buckets]
}

// bySlot lists the buckets in the order of their hash slots; slotRank is
// a bucket's place in it.
var bySlot, slotRank = slotOrder()

func slotOrder() (order, rank []int) {
	order = make([]int, buckets)
	for b := range order {
		order[b] = b
	}
	slot := func(b int) int { return int(crc16(keys{}.bucket(b)[2:4]) % 16384) }
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(slot(a), slot(b)), cmp.Compare(a, b)) })
	rank = make([]int, buckets)
	for i, b := range order {
		rank[b] = i
	}
	return order, rank
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM) of a hash tag.
func crc16(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// EpochKey is the key of the epoch of task's bucket under prefix: what a
// data loss of its shard removes, and the quarantine brings back.
func EpochKey(prefix, task string) string { return keys{prefix}.epoch(bucketOf(task)) }

// EpochKeys are the keys of every bucket's epoch under prefix.
func EpochKeys(prefix string) []string {
	ks := make([]string, buckets)
	for bk := range ks {
		ks[bk] = keys{prefix}.epoch(bk)
	}
	return ks
}

// HistoryKeys are the keys of task's history under prefix: its tick
// records, failures and actions, in the slot of its entities (TaskKey).
func HistoryKeys(prefix, task string) []string {
	k := keys{prefix}
	return []string{k.ticks(task), k.list(task, listFailures), k.list(task, listActions)}
}

// SameBucket says whether tasks a and b share a bucket: one hash tag, and
// one data-loss quarantine, whose length must cover both tasks' leases.
func SameBucket(a, b string) bool { return bucketOf(a) == bucketOf(b) }

// keys holds the key layout under one prefix. A bucket's keys begin with
// prefix:{NN} (NN its two-digit number, the hash tag):
//
//	prefix:{NN}:epoch                 the bucket's epoch (data-loss detection)
//	prefix:{NN}:due, prefix:{NN}:dueinfo  its tasks' pending requests
//	prefix:{NN}:TASK:entities         everything about TASK's entities, one field each
//	prefix:{NN}:TASK:followups        request ids queued follow-ups answer
//	prefix:{NN}:TASK:request:ID       a request's answers
//	prefix:{NN}:TASK:ix, TASK:ixn     each entity's number (from 1), the count given
//	prefix:{NN}:TASK:ran:TICK         the run record: bit N set when entity N ran TICK
//	                                  (bit 0: the record was kept), for Request.Record
//	prefix:{NN}:TASK:ran:TICK:NAME    a record of TICK of its own (Request.RecordOf)
//
// A batch of one task's entities is read and written with one HMGET and one
// HSET. A task of several shards keeps shard s's (s > 0) under the name
// TASK~s (driver.ShardName), in bucket s after its own. The keys no script
// touches with others are global: prefix:paused, prefix:replicas,
// prefix:claim:NAME, prefix:ackprobe, prefix:layout. A task's shard count is
// prefix:{NN}:TASK:shards, in its own slot: a master down elsewhere does
// not keep a store from reading it.
type keys struct{ prefix string }

func (k keys) bucket(b int) string {
	return k.prefix + ":{" + string(rune('0'+b/10)) + string(rune('0'+b%10)) + "}"
}
func (k keys) task(task string) string          { return k.bucket(bucketOf(task)) + ":" + driver.Escape(task) }
func (k keys) entities(task string) string      { return k.task(task) + ":entities" }
func (k keys) followups(task string) string     { return k.task(task) + ":followups" }
func (k keys) request(task, id string) string   { return k.task(task) + ":request:" + id }
func (k keys) claims(task, tick string) string  { return k.task(task) + ":claims:" + tick }
func (k keys) ticks(task string) string         { return k.task(task) + ":ticks" }
func (k keys) entityNumbers(task string) string { return k.task(task) + ":ix" }
func (k keys) entityCount(task string) string   { return k.task(task) + ":ixn" }
func (k keys) ran(task, tick string) string     { return k.task(task) + ":ran:" + tick }

// ranOf is the run record of tick named of (Request.RecordOf).
func (k keys) ranOf(task, tick, of string) string { return k.ran(task, tick) + ":" + driver.Escape(of) }
func (k keys) epoch(b int) string                 { return k.bucket(b) + ":epoch" }
func (k keys) due(b int) string                   { return k.bucket(b) + ":due" }
func (k keys) dueInfo(b int) string               { return k.bucket(b) + ":dueinfo" }
func (k keys) paused() string                     { return k.prefix + ":paused" }
func (k keys) revoked() string                    { return k.prefix + ":revoked" } // a channel
func (k keys) dueWake() string                    { return k.prefix + ":duewake" } // a channel: lib.lua's add_due
func (k keys) replicas() string                   { return k.prefix + ":replicas" }
func (k keys) duplicates() string                 { return k.prefix + ":duplicates" }
func (k keys) pauses() string                     { return k.prefix + ":pauses" }
func (k keys) registry() string                   { return k.prefix + ":tasks" }
func (k keys) shards(task string) string          { return k.task(task) + ":shards" }
func (k keys) migrating(task string) string       { return k.task(task) + ":migrating" } // the lock of a reshard under way
func (k keys) claim(name string) string           { return k.prefix + ":claim:" + driver.Escape(name) }
func (k keys) layout() string                     { return k.prefix + ":layout" }
func (k keys) backfills() string                  { return k.prefix + ":backfills" }

// fanned is the fan marks of the day of tick (ms, decimal): a bit per
// second of the day (driver.FannedKept).
func (k keys) fanned(task, tick string) string {
	ms, _ := strconv.ParseInt(tick, 10, 64) //nolint:errcheck // tickMS's digits
	return k.task(task) + ":fan:" + strconv.FormatInt(ms/86_400_000, 10)
}

// list is one of a task's lists (listFailures, listActions), or the
// prefix's for task "" (the actions on no one task: migrate).
func (k keys) list(task, list string) string {
	if task == "" {
		return k.prefix + ":" + list
	}
	return k.task(task) + ":" + list
}

// oldLayout lists keys only layout 1 has: an older tickd on the same prefix
// writes the first on every acquire.
func (k keys) oldLayout() []string { return []string{k.prefix + ":epoch", k.prefix + ":due"} }

// probe is the key Store.Replication writes to see the replicas acknowledge.
func (k keys) probe() string { return k.prefix + ":ackprobe" }

// entitiesPattern matches every task's hash in SCAN. Escaped names hold no
// glob characters.
func (k keys) entitiesPattern() string { return k.prefix + ":{[0-9][0-9]}:*:entities" }

// taskOf extracts the task from the key of its hash.
func (k keys) taskOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix+":{")
	if !ok || len(rest) < 4 || rest[2:4] != "}:" {
		return "", false
	}
	esc, ok := strings.CutSuffix(rest[4:], ":entities")
	if !ok {
		return "", false
	}
	task, err := driver.Unescape(esc)
	return task, err == nil && k.entities(task) == key
}
