package redisdriver

import (
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
		m := driver.Member(task, entity)
		gt, ge, err := driver.SplitMember(m)
		if err != nil || gt != task || ge != entity {
			t.Fatalf("member %q decodes to %q %q %v", m, gt, ge, err)
		}
	})
}
