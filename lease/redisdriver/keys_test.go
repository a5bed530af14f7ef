package redisdriver

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tickd/tickd/lease/driver"
)

// FuzzKeyEncoding: a task's key and an entity's field are safe whatever
// the ids, and decode back.
func FuzzKeyEncoding(f *testing.F) {
	for _, id := range []string{hostile, "", "a:b", "{x}", "*", "%41", "é"} {
		f.Add("task", id)
	}
	f.Add("a:b", "c")
	f.Add("a", "b:c")
	f.Fuzz(func(t *testing.T, task, entity string) {
		k := keys{prefix: "tickd"}.entities(task)
		// One hash tag, no glob or control characters, no whitespace.
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || strings.ContainsAny(k, "*?[]\\ \n\r\t\x00") {
			t.Fatalf("unsafe key %q", k)
		}
		// Injective: a decoding that round-trips proves no other task maps here.
		if got, ok := (keys{prefix: "tickd"}).taskOf(k); !ok || got != task {
			t.Fatalf("taskOf(%q) = %q", k, got)
		}
		// An entity's hash field holds none of the separators of the values
		// stored beside it, and decodes back.
		field := driver.Escape(entity)
		if strings.ContainsAny(field, "|#:{}*?[]\\ \n\r\t\x00") {
			t.Fatalf("unsafe field %q", field)
		}
		if got, err := driver.Unescape(field); err != nil || got != entity {
			t.Fatalf("field %q decodes to %q %v", field, got, err)
		}
		m := member(task, entity)
		gt, ge, err := splitMember(m)
		if err != nil || gt != task || ge != entity {
			t.Fatalf("member %q decodes to %q %q %v", m, gt, ge, err)
		}
	})
}

// TestShardBuckets: Redis Cluster's hash is the one computed (CRC-16/XMODEM's
// check value), a task's shards are each in a bucket of their own, and 16
// of them, from any task's bucket, leave no third of the slots more than
// 6 (a master of three as created: at most 37.5% of the task).
func TestShardBuckets(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
	for b := range buckets {
		task := ""
		for i := 0; bucketOf(task) != b; i++ {
			task = "task-" + strconv.Itoa(i)
		}
		seen := map[int]bool{}
		var thirds [3]int
		for s := range driver.MaxShards {
			bk := bucketOf(driver.ShardName(task, s))
			if seen[bk] {
				t.Fatalf("%s: shard %d in bucket %d, taken", task, s, bk)
			}
			seen[bk] = true
			if s < 16 {
				thirds[int(crc16(keys{}.bucket(bk)[2:4])%16384)*3/16384]++
			}
		}
		if slices.Max(thirds[:]) > 6 {
			t.Errorf("%s (bucket %d): 16 shards over the thirds of the slots %v", task, b, thirds)
		}
	}
}
