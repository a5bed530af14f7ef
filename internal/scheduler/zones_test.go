package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/tasks"
)

// TestEachEntityTicksInItsZone: with timezone_from, each entity's run is
// its schedule's tick in its own zone (hourly at :00 local: :00 UTC, :30
// in Kolkata, :15 in Kathmandu), caught up once per zone at start, each
// entity once; an entity without the attribute ticks in the task's zone,
// and one whose zone is unknown is skipped and counted at the task's own
// ticks.
func TestEachEntityTicksInItsZone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	zones := map[string]string{"utc-1": "", "utc-2": "UTC", "ist-1": "Asia/Kolkata", "ist-2": "Asia/Kolkata", "npt": "Asia/Kathmandu", "mars": "Mars/Base"}
	var lines []string
	for id, z := range zones {
		if z == "" {
			lines = append(lines, fmt.Sprintf(`{"id": %q}`, id))
		} else {
			lines = append(lines, fmt.Sprintf(`{"id": %q, "tz": %q}`, id, z))
		}
	}
	file := filepath.Join(t.TempDir(), "entities.jsonl")
	os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644) //nolint:errcheck
	began := time.Now()
	_, st := e.start(fmt.Sprintf(`
[[tasks]]
name = "local"
every = "1h"
catch_up = "1h"
handler = "rec"
entities_file = %q
entities_format = "jsonl"
timezone_from = "tz"
`, file))
	expect.WaitFor(t, 10*time.Second, "a run of each entity with a zone", func() bool { return e.rec.count(func(runRec) bool { return true }) == 5 })
	e.ev.waitFor(t, 10*time.Second, "the unknown zone counted", func(ev Event) bool { return ev.Kind == EventTick && ev.Counts.UnknownZone == 1 })
	ended := time.Now()
	// Each tick's record says which zones it served.
	expect.WaitFor(t, 10*time.Second, "the ticks' records, with their zones", func() bool {
		rs, err := st.Fleet().Ticks(context.Background(), "local", 10)
		served := map[string]bool{}
		for _, r := range rs {
			served[strings.Join(r.Zones(), ",")] = true
		}
		return err == nil && served["UTC"] && served["Asia/Kolkata"] && served["Asia/Kathmandu"]
	})
	seen := map[string]int{}
	for _, r := range e.rec.snapshot() {
		seen[r.Entity]++
		loc := time.UTC
		if z := zones[r.Entity]; z != "" {
			loc, _ = time.LoadLocation(z)
		}
		l := r.Tick.In(loc)
		expect.True(t, fmt.Sprintf("%s ticks at :00 in %v (got %v)", r.Entity, loc, l), l.Minute() == 0 && l.Second() == 0)
		expect.True(t, fmt.Sprintf("%s's tick %v is the latest before the start", r.Entity, r.Tick), !r.Tick.After(ended) && began.Sub(r.Tick) <= time.Hour)
		expect.Equal(t, r.Entity+"'s TICKD_ATTR_TZ", r.Attributes["tz"], zones[r.Entity])
	}
	for id, z := range zones {
		want := 1
		if z == "Mars/Base" {
			want = 0
		}
		expect.Equal(t, id+"'s runs", seen[id], want)
	}
}

// TestAZoneChangeNeverRunsTwiceInALocalDay: an entity whose zone changes
// between two starts of a daily task ("0 9 * * *") runs at most once per
// local date of its new zone: one that moved west (Berlin to New York: its
// 09:00 comes later the same day) is not run again that day; one that
// moved east (New York to Berlin) runs at Berlin's next 09:00, a date it
// had not run on.
func TestAZoneChangeNeverRunsTwiceInALocalDay(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	berlin, ny := day.Add(8*time.Hour), day.Add(14*time.Hour) // 09:00 local, the same date
	for _, c := range []struct {
		name     string
		now      time.Time
		from, to string
		first    time.Time // the run in the old zone
		second   time.Time // the tick in the new zone
		again    bool      // whether it runs there
	}{
		{"west", day.Add(15 * time.Hour), "Europe/Berlin", "America/New_York", berlin, ny, false},
		{"east", day.Add(24*time.Hour + 8*time.Hour + 30*time.Minute), "America/New_York", "Europe/Berlin", ny, berlin.Add(24 * time.Hour), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false)
			file := filepath.Join(t.TempDir(), "entities.jsonl")
			write := func(zone string) {
				os.WriteFile(file, []byte(fmt.Sprintf(`{"id": "shop", "tz": %q}`, zone)), 0o644) //nolint:errcheck
			}
			toml := fmt.Sprintf(`
[[tasks]]
name = "daily"
cron = "0 9 * * *"
catch_up = "24h"
handler = "rec"
entities_file = %q
entities_format = "jsonl"
timezone_from = "tz"
`, file)
			clock := shiftedClock(time.Until(c.now)) // the catch-up finds the ticks before it
			tickOf := func(T time.Time) func(Event) bool {
				return func(ev Event) bool { return ev.Kind == EventTick && ev.Task == "daily" && ev.Tick.Equal(T) }
			}
			write(c.from)
			st := e.store("r1")
			e.run(toml, Options{Store: st, Clock: clock, DuePoll: 20 * time.Millisecond})
			e.ev.waitFor(t, 10*time.Second, "the tick in the old zone", tickOf(c.first))
			expect.WaitFor(t, 10*time.Second, "its run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 1 })
			write(c.to)
			e.run(toml, Options{Store: st, Clock: clock, DuePoll: 20 * time.Millisecond})
			e.ev.waitFor(t, 10*time.Second, "the tick in the new zone", tickOf(c.second))
			want := 1
			if c.again {
				want = 2
				expect.WaitFor(t, 10*time.Second, "its second run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 2 })
			}
			ticks := []time.Time{}
			for _, r := range e.rec.snapshot() {
				ticks = append(ticks, r.Tick)
			}
			expect.Equal(t, fmt.Sprintf("runs (ticks %v)", ticks), len(ticks), want)
		})
	}
}

// TestZonesCatchUpOneAfterAnother: the catch-ups of a task's zones fan out
// oldest first, one after another, each with the task's run slots to
// itself: every run of an older tick starts before any run of a newer one
// (at once, the fan-outs split the slots, and a batch was as small as its
// share: 4 times the Redis commands a run at 1,000,000 entities).
func TestZonesCatchUpOneAfterAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	file := filepath.Join(t.TempDir(), "entities.jsonl")
	var lines []string
	zones := []string{"Asia/Tokyo", "Europe/Berlin", "America/New_York"}
	for i := range 120 {
		lines = append(lines, fmt.Sprintf(`{"id": "e%d", "tz": %q}`, i, zones[i%len(zones)]))
	}
	os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644) //nolint:errcheck
	noon := time.Date(2026, 3, 2, 23, 0, 0, 0, time.UTC)         // after 09:00 in each
	e.run(fmt.Sprintf(`
[[tasks]]
name = "daily"
cron = "0 9 * * *"
catch_up = "24h"
concurrency = 4
handler = "rec"
entities_file = %q
entities_format = "jsonl"
timezone_from = "tz"
`, file), Options{Store: e.store("r1"), Clock: shiftedClock(time.Until(noon)), DuePoll: 20 * time.Millisecond})
	expect.WaitFor(t, 20*time.Second, "every entity's run", func() bool { return e.rec.count(func(runRec) bool { return true }) == 120 })
	// In the order the runs were granted: a fresh entity's fence is the
	// store's clock at its grant (a handler's own start can come later
	// than a newer run's, its goroutine scheduled late on a loaded
	// machine).
	runs := e.rec.snapshot()
	slices.SortStableFunc(runs, func(a, b runRec) int { return cmp.Compare(a.Fence, b.Fence) })
	for i := 1; i < len(runs); i++ {
		if runs[i].Tick.Before(runs[i-1].Tick) {
			t.Fatalf("run %d (%s, tick %v) granted after run %d (%s, tick %v): the zones' catch-ups went at once", i-1, runs[i-1].Entity, runs[i-1].Tick, i, runs[i].Entity, runs[i].Tick)
		}
	}
}

// streamedSource yields n entities in the UTC zone, noting at each how
// many the fan-out had sent by then.
type streamedSource struct {
	n         int
	sentAt    []int
	sentSoFar *int
}

func (s *streamedSource) Each(ctx context.Context, fn func(string) error) error {
	return s.EachEntity(ctx, func(e tasks.Entity) error { return fn(e.ID) })
}

func (s *streamedSource) EachEntity(_ context.Context, fn func(tasks.Entity) error) error {
	for i := range s.n {
		s.sentAt = append(s.sentAt, *s.sentSoFar)
		if err := fn(tasks.Entity{ID: fmt.Sprint("e", i), Attributes: tasks.Attributes{"tz": "UTC"}}); err != nil {
			return err
		}
	}
	return nil
}

// TestAZonesFanOutSendsInOneBurst: a fan-out of zones keeps its instant's
// entities until the source is read, then sends them, up to zoneBurst;
// past it, it sends as it reads. Sent as read, the batches of a source
// whose zones interleave went out one every few hundred lines, and Redis
// spent a quarter more a run on them (BenchmarkZonedDay).
func TestAZonesFanOutSendsInOneBurst(t *testing.T) {
	t.Parallel()
	T := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cfg, err := config.Parse("t.toml", []byte("[[tasks]]\nname = \"z\"\ncron = \"0 9 * * *\"\nhandler = \"h\"\nentities_file = \"/dev/null\"\nentities_format = \"jsonl\"\ntimezone_from = \"tz\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1000, zoneBurst + 10} {
		sent := 0
		src := &streamedSource{n: n, sentSoFar: &sent}
		ts := &taskState{t: cfg.Tasks[0], source: src, zones: newZoneSet(cfg.Tasks[0].Schedule)}
		f := &fanOut{ctx: context.Background(), ts: ts, T: T, n: &TickCounts{}, attrs: map[string]tasks.Attributes{}}
		f.zones = newZoneFilter(ts.zones, T, nil)
		if err := f.each(func(string) error { sent++; return nil }); err != nil {
			t.Fatal(err)
		}
		expect.Equal(t, fmt.Sprintf("%d entities: sent", n), sent, n)
		last := src.sentAt[len(src.sentAt)-1]
		if n <= zoneBurst {
			expect.Equal(t, fmt.Sprintf("%d entities: sent before the source was read", n), last, 0)
		} else {
			expect.Equal(t, fmt.Sprintf("%d entities: sent before the last was read, the burst full", n), last, n-1)
		}
	}
}
