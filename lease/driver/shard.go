package driver

import (
	"hash/crc32"
	"strconv"
	"strings"
)

// MaxShards bounds a task's shards: a Redis driver spreads them over its
// 64 buckets, one bucket each.
const MaxShards = 64

// ShardMark joins a task's name and a shard's number in the name a driver
// is given for the shard (ShardName). Task names hold no '~': the store
// refuses them, and a config's names are letters, digits and . _ -.
const ShardMark = "~"

// ShardName is the name a driver knows shard s of task by: the task's own
// name for shard 0, so that a task of one shard keeps the keys it had
// before tasks had shards; task~s for the others.
func ShardName(task string, s int) string {
	if s == 0 {
		return task
	}
	return task + ShardMark + strconv.Itoa(s)
}

// SplitShard reverses ShardName: the task and the shard a driver's name is
// of. A name with no shard mark is shard 0 of itself.
func SplitShard(name string) (task string, shard int) {
	i := strings.LastIndex(name, ShardMark)
	if i < 0 {
		return name, 0
	}
	s, err := strconv.Atoi(name[i+1:])
	if err != nil || s <= 0 || s >= MaxShards || strconv.Itoa(s) != name[i+1:] {
		return name, 0
	}
	return name[:i], s
}

// ShardOf is the shard of entity among n: CRC-32 (IEEE) of its id, modulo
// n. Every replica computes it alike, so one entity's lease, last run and
// due entries are always in the same shard while n stays.
func ShardOf(entity string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(entity)) % uint32(n))
}
