package schedule

import (
	"archive/zip"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// zoneNames are the IANA zones of Go's own database (lib/time/zoneinfo.zip
// under go env GOROOT), the same on every machine with Go; -short takes
// every 15th.
func zoneNames(t *testing.T) []string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v (the zone list is Go's own: run the tests with the go command)", err)
	}
	path := filepath.Join(strings.TrimSpace(string(root)), "lib", "time", "zoneinfo.zip")
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("the zone list is Go's %s: %v (install Go whole: its lib/time holds it)", path, err)
	}
	defer z.Close()
	var names []string
	for i, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") && (!testing.Short() || i%15 == 0) {
			names = append(names, f.Name)
		}
	}
	if len(names) < 30 {
		t.Fatalf("%d zones in %s", len(names), path)
	}
	return names
}

// expectedTicks computes, apart from the schedule code, the instants at
// which wall-clock times ws (minutes after midnight) fall on local date d
// in loc: each wall time at every instant whose reading it is (both
// occurrences of a repeated hour when repeat, the first only else), and a
// wall time the clock skips (spring forward) at the first instant after the
// gap.
func expectedTicks(loc *time.Location, d time.Time, ws []int, repeat bool) []time.Time {
	var out []time.Time
	for _, m := range ws {
		w := time.Date(d.Year(), d.Month(), d.Day(), m/60, m%60, 0, 0, time.UTC) // the wall reading, as UTC
		var at []time.Time
		offs := map[int]bool{}
		for _, probe := range []time.Time{w.Add(-36 * time.Hour), w, w.Add(36 * time.Hour)} {
			_, off := probe.In(loc).Zone()
			offs[off] = true
		}
		for off := range offs {
			x := w.Add(-time.Duration(off) * time.Second)
			if l := x.In(loc); l.Hour()*60+l.Minute() == m && l.Day() == d.Day() && l.Second() == 0 {
				at = append(at, x)
			}
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		switch {
		case len(at) == 0: // in a gap: the first instant after it
			_, before := w.Add(-36 * time.Hour).In(loc).Zone()
			start, _ := w.Add(-time.Duration(before) * time.Second).In(loc).ZoneBounds()
			out = append(out, start)
		case repeat:
			out = append(out, at...)
		default:
			out = append(out, at[0])
		}
	}
	return out
}

// transitionDays are the local dates (as UTC midnights) within a day of
// each of loc's offset changes between from and to.
func transitionDays(loc *time.Location, from, to time.Time) map[time.Time]bool {
	days := map[time.Time]bool{}
	for t := from; t.Before(to); {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		l := end.In(loc)
		day := time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, time.UTC)
		for _, d := range []time.Time{day.AddDate(0, 0, -1), day, day.AddDate(0, 0, 1)} {
			days[d] = true
		}
		t = end
	}
	return days
}

// TestEveryZoneForTenYears: a schedule evaluated in each IANA zone (In, as
// timezone_from does per entity) ticks exactly at the instants an
// independent computation gives, over ten years: a daily schedule on every
// local day; one at 02:30 (in most gaps and repeated hours), an hourly and
// a quarter-hourly one on the days around each offset change and on every
// 73rd day of the year besides. The zones are checked in parallel. No tick lost, none doubled,
// the repeated hour as cronie runs it (twice for a '*' hour or minute
// field), a skipped wall time at the gap's end.
func TestEveryZoneForTenYears(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(10, 0, 0)
	cases := []zoneCase{
		{"0 9 * * *", []int{9 * 60}, false, true},
		{"30 2 * * *", []int{2*60 + 30}, false, false}, // in most gaps and repeats
		{"0 * * * *", minutes(60), true, false},
		{"*/15 * * * *", minutes(15), true, false},
	}
	names := make(chan string)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				checkZone(t, name, from, to, cases)
			}
		}()
	}
	for _, name := range zoneNames(t) {
		names <- name
	}
	close(names)
	wg.Wait()
}

// zoneCase is a schedule TestEveryZoneForTenYears checks: its wall times
// (minutes after midnight), whether it ticks in both occurrences of a
// repeated hour, and whether it is checked on every day.
type zoneCase struct {
	spec   string
	walls  []int
	repeat bool
	all    bool
}

// checkZone checks each case in zone name from from to to.
func checkZone(t *testing.T, name string, from, to time.Time, cases []zoneCase) {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	near := transitionDays(loc, from.AddDate(0, 0, -2), to)
	for _, c := range cases {
		base, err := ParseCron(c.spec, time.UTC)
		if err != nil {
			t.Error(err) // not Fatal: checkZone runs off the test's goroutine
			return
		}
		s := In(base, loc)
		bad := 0
		for d := from; d.Before(to) && bad < 3; d = d.AddDate(0, 0, 1) {
			if !c.all && !near[d] && d.YearDay()%73 != 0 {
				continue
			}
			want := dedupe(expectedTicks(loc, d, c.walls, c.repeat))
			// The ticks of local date d: from its first expected one.
			var got []time.Time
			for at := s.Next(want[0].Add(-time.Nanosecond)); !at.IsZero() && !at.After(want[len(want)-1]); at = s.Next(at) {
				got = append(got, at)
			}
			if !slices.EqualFunc(got, want, time.Time.Equal) {
				bad++
				t.Errorf("%s, %q on %s: got %v, want %v", name, c.spec, d.Format("2006-01-02"), instants(got), instants(want))
			}
		}
	}
}

func minutes(step int) []int {
	var ms []int
	for m := 0; m < 24*60; m += step {
		ms = append(ms, m)
	}
	return ms
}

// dedupe sorts ts and drops repeats: wall times merged at a gap's end tick
// once.
func dedupe(ts []time.Time) []time.Time {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(ts, time.Time.Equal)
}

func instants(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.UTC().Format(time.RFC3339)
	}
	return out
}
