package faults

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// zoned is the nemesis's task whose entities carry attributes and tick in
// zones of their own (timezone_from), every 7s: 7s does not divide the
// zones' offsets, so the zones tick at instants of their own. At reloads
// its entities move between zones (one of them no zone), their attributes
// change, timezone_from comes and goes, and its source moves between a
// file and an endpoint, which fails at times (the last good list stands
// in). Its runs start under a limit of its own, 2 at once, which a reload
// makes fair by the entities' plan or not (weight_from, at times), and its
// runs take an entity's own head start (priority_from) or not. The checker
// judges its runs as every task's: no overlap, no tick run twice.
type zoned struct {
	file     string
	srv      *httptest.Server
	failing  atomic.Bool
	zoneOf   []string // by entity z0…
	plan     []string
	fromURL  bool
	zonesOn  bool
	revision int
	fair     string // the limit's fair_by and weight_from lines, or ""
	prioOn   bool   // priority_from = "prio"
}

// zonedZones are the zones the nemesis moves entities between: their
// offsets modulo 7s differ (UTC 0, Kathmandu 1, Berlin 2, Kolkata 4), and
// one is no zone.
var zonedZones = []string{"UTC", "Asia/Kathmandu", "Europe/Berlin", "Asia/Kolkata", "Mars/Base"}

func newZoned(t *testing.T, dir string, rnd *rand.Rand) *zoned {
	z := &zoned{file: filepath.Join(dir, "zoned.jsonl"), zonesOn: true, zoneOf: make([]string, 8), plan: make([]string, 8), fair: "fair_by = \"plan\"\n", prioOn: true}
	for i := range z.zoneOf {
		z.zoneOf[i], z.plan[i] = zonedZones[rnd.IntN(len(zonedZones)-1)], "basic"
	}
	z.write(t)
	z.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if z.failing.Load() {
			http.Error(w, "the CRM is down", http.StatusInternalServerError)
			return
		}
		http.ServeFile(w, r, z.file) // its ETag: none; Last-Modified, which tickd does not use
	}))
	t.Cleanup(z.srv.Close)
	return z
}

// write writes the entity file whole, then renames it into place: a
// reader sees the old list or the new.
func (z *zoned) write(t *testing.T) {
	var b strings.Builder
	for i, zone := range z.zoneOf {
		fmt.Fprintf(&b, "{\"id\": \"z%d\", \"tz\": %q, \"plan\": %q, \"w\": \"%d\", \"prio\": \"%ds\", \"rev\": %d}\n",
			i, zone, z.plan[i], 1+i%3, i%4, z.revision)
	}
	tmp := z.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		expect.Fatalf(t, "%v", err)
	}
	if err := os.Rename(tmp, z.file); err != nil {
		expect.Fatalf(t, "%v", err)
	}
}

// config is the task's table.
func (z *zoned) config(worker string) string {
	source := fmt.Sprintf("entities_file = %q", z.file)
	if z.fromURL {
		source = fmt.Sprintf("entities_url = %q\nentities_timeout = \"2s\"", z.srv.URL)
	}
	from := ""
	if z.zonesOn {
		from = "timezone_from = \"tz\"\n"
	}
	if z.prioOn {
		from += "priority_from = \"prio\"\n"
	}
	return fmt.Sprintf("\n[[limits]]\nname = \"z-api\"\nconcurrency = 2\n%s\n[[tasks]]\nname = \"zoned\"\nevery = \"7s\"\nlease_ttl = \"2s\"\ncommand = [%q, \"300ms\"]\nentities_format = \"jsonl\"\nlimits = [\"z-api\"]\n%s%s\n",
		z.fair, worker, from, source)
}

// change moves one to three entities to other zones and changes their
// plan; at times it also moves the source, turns timezone_from on or off,
// or makes the endpoint fail (or recover). It says what it did.
func (z *zoned) change(t *testing.T, rnd *rand.Rand) string {
	z.revision++
	var moved []string
	for range 1 + rnd.IntN(3) {
		i := rnd.IntN(len(z.zoneOf))
		z.zoneOf[i] = zonedZones[rnd.IntN(len(zonedZones))]
		z.plan[i] = []string{"basic", "pro"}[rnd.IntN(2)]
		moved = append(moved, fmt.Sprintf("z%d->%s", i, z.zoneOf[i]))
	}
	z.write(t)
	switch rnd.IntN(7) {
	case 0:
		z.fromURL = !z.fromURL
	case 1:
		z.zonesOn = !z.zonesOn
	case 2:
		z.failing.Store(!z.failing.Load())
	case 3:
		z.prioOn = !z.prioOn
	}
	if rnd.IntN(3) == 0 {
		z.fair = []string{"", "fair_by = \"plan\"\n", "fair_by = \"plan\"\nweight_from = \"w\"\n"}[rnd.IntN(3)]
	}
	return fmt.Sprintf("zoned: %s, from_url %v, timezone_from %v, endpoint failing %v, fair %q, priority_from %v",
		strings.Join(moved, " "), z.fromURL, z.zonesOn, z.failing.Load(), strings.ReplaceAll(z.fair, "\n", " "), z.prioOn)
}
