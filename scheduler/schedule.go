package scheduler

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule yields a task's ticks. Next(t) is the first tick strictly after
// t. It depends on t and the config alone, so every replica computes the
// same ticks; callers pass the previous planned tick, never "now", to avoid
// drift.
type Schedule interface {
	Next(t time.Time) time.Time
}

// Wall-clock schedules are computed on local wall-clock times, then mapped
// to instants by resolve:
//   - a wall time that occurs twice (fall-back hour) maps to its first
//     occurrence, so a tick in a repeated hour runs once, not twice;
//   - a wall time that does not exist (spring-forward gap) maps to the first
//     instant after the gap, so the tick still runs.

// wall returns t's local wall-clock reading in loc, as a UTC time.
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// resolve maps wall-clock time w (a UTC time holding local fields) to the
// instant it names in loc.
func resolve(w time.Time, loc *time.Location) time.Time {
	// The offsets in force well before and well after w: real zones never
	// change offset twice within 28 hours.
	_, offBefore := w.Add(-14 * time.Hour).In(loc).Zone()
	_, offAfter := w.Add(14 * time.Hour).In(loc).Zone()
	// Recompute with the instants those offsets give, which is exact away
	// from the transition.
	a := w.Add(-time.Duration(offBefore) * time.Second)
	b := w.Add(-time.Duration(offAfter) * time.Second)
	var best time.Time
	for _, c := range []time.Time{a, b} {
		if wall(c, loc).Equal(w) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: the first instant after it is where the new offset starts.
	start, _ := a.In(loc).ZoneBounds()
	if start.IsZero() || start.After(a) {
		start, _ = b.In(loc).ZoneBounds()
	}
	return start
}

// Every ticks at wall-clock multiples of Interval in Location: "15m" ticks
// at :00 :15 :30 :45 local time, "24h" at local midnight. Unlike robfig's
// @every it does not count from process start, so replicas agree.
type Every struct {
	Interval time.Duration
	Location *time.Location
}

// Next returns the first tick after t.
func (e Every) Next(t time.Time) time.Time {
	w := wall(t, e.Location).Truncate(e.Interval)
	for i := 0; i < 100000; i++ {
		w = w.Add(e.Interval)
		if at := resolve(w, e.Location); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// Cron is a robfig/cron schedule evaluated on wall-clock time, so that
// daylight saving gaps and repeats follow the rules above (robfig alone
// skips a tick in a spring-forward gap).
type Cron struct {
	Spec     cron.Schedule
	Location *time.Location
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses 5 fields, 6 fields (seconds first) or a descriptor such
// as @hourly. @every and CRON_TZ= are refused: use every and timezone.
func ParseCron(spec string, loc *time.Location) (Cron, error) {
	s := strings.TrimSpace(spec)
	switch {
	case strings.HasPrefix(s, "@every"):
		return Cron{}, fmt.Errorf("%q: @every counts from process start, so replicas would disagree on ticks; use every = \"…\" instead", spec)
	case strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ="):
		return Cron{}, fmt.Errorf("%q: set the zone with timezone = \"…\", not in the expression", spec)
	}
	if n := len(strings.Fields(s)); !strings.HasPrefix(s, "@") && (n < 5 || n > 6) {
		return Cron{}, fmt.Errorf("%q has %d fields: use 5 (minute hour day month weekday), 6 (seconds first) or a descriptor like @hourly", spec, n)
	}
	fields := strings.Fields(s)
	if !strings.HasPrefix(s, "@") {
		fields[len(fields)-1] = sundayAsZero(fields[len(fields)-1])
		s = strings.Join(fields, " ")
	}
	sch, err := cronParser.Parse(s)
	if err != nil {
		return Cron{}, fmt.Errorf("bad cron expression %q: %v", spec, err)
	}
	if ss, ok := sch.(*cron.SpecSchedule); ok && !strings.HasPrefix(s, "@") {
		crontabDays(ss, fields[len(fields)-3], fields[len(fields)-1])
	}
	c := Cron{Spec: sch, Location: loc}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Cron{}, fmt.Errorf("%q can never fire: no date has that day of the month in that month", spec)
	}
	return c, nil
}

// starBit is robfig/cron's mark of a day field that is unrestricted.
const starBit = 1 << 63

// crontabDays makes the day rule crontab(5)'s: day of month and day of week
// are OR-ed only when both are restricted, and a field that starts with '*'
// is unrestricted, whatever follows ("*/7" too). robfig/cron counts "*/N"
// as restricted, so "0 0 1-7 * */7" (the first Sunday of the month) would
// also run on every Sunday.
func crontabDays(s *cron.SpecSchedule, dom, dow string) {
	for _, f := range []struct {
		text string
		bits *uint64
	}{{dom, &s.Dom}, {dow, &s.Dow}} {
		if strings.HasPrefix(f.text, "*") || strings.HasPrefix(f.text, "?") {
			*f.bits |= starBit
		} else {
			*f.bits &^= starBit
		}
	}
}

// sundayAsZero rewrites crontab(5)'s 7 for Sunday, which robfig/cron
// refuses, as 0: "7" becomes "0", and a range ending at 7 with no step,
// "N-7", becomes "N-6,0". Other uses of 7 are left for the parser to refuse.
func sundayAsZero(dow string) string {
	parts := strings.Split(dow, ",")
	for i, p := range parts {
		switch {
		case p == "7":
			parts[i] = "0"
		case strings.HasSuffix(p, "-7") && !strings.Contains(p, "/"):
			parts[i] = strings.TrimSuffix(p, "-7") + "-6,0"
		}
	}
	return strings.Join(parts, ",")
}

// cronYears is how far Next looks for a tick: robfig/cron gives up after
// five years, and a February 29th that must also be a given weekday comes
// once in 28.
const cronYears = 30

// Next returns the first tick after t, or zero if none comes within
// cronYears.
func (c Cron) Next(t time.Time) time.Time {
	w := wall(t, c.Location)
	for i := 0; i < 100000; i++ {
		n := c.Spec.Next(w)
		for y := 5; n.IsZero() && y < cronYears; y += 5 { // robfig/cron looks 5 years ahead
			n = c.Spec.Next(w.AddDate(y, 0, 0))
		}
		if w = n; w.IsZero() {
			return w
		}
		if at := resolve(w, c.Location); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// SpreadOffset is where in [0, spread) the run of entity starts after its
// tick: a hash of task and entity, the same on every replica.
func SpreadOffset(task, entity string, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(task))   //nolint:errcheck
	h.Write([]byte{0})      //nolint:errcheck
	h.Write([]byte(entity)) //nolint:errcheck
	return time.Duration(h.Sum64() % uint64(spread))
}

// Prev returns the latest tick at or before t, searching back at most
// within: the tick a catch-up would run. Zero if there is none.
func Prev(s Schedule, t time.Time, within time.Duration) time.Time {
	var last time.Time
	for at := s.Next(t.Add(-within - time.Nanosecond)); !at.IsZero() && !at.After(t); at = s.Next(at) {
		last = at
	}
	return last
}

// DSTNote says how daylight saving shaped the tick at of s, or "": a tick
// moved out of a spring-forward gap (its wall-clock time does not exist
// that day), or one whose wall-clock time comes twice (fall-back), which
// runs at the first only.
func DSTNote(s Schedule, at time.Time) string {
	var loc *time.Location
	moved := false
	switch x := s.(type) {
	case Every:
		loc = x.Location
		w := wall(at, loc)
		moved = !w.Truncate(x.Interval).Equal(w)
	case Cron:
		loc = x.Location
		w := wall(at, loc)
		moved = !x.Spec.Next(w.Add(-time.Second)).Equal(w)
	default:
		return ""
	}
	if moved {
		return "moved by daylight saving: its wall-clock time does not exist that day (spring forward), so it runs at the first instant after the gap"
	}
	_, before := at.Add(-14 * time.Hour).In(loc).Zone()
	_, after := at.Add(14 * time.Hour).In(loc).Zone()
	if d := time.Duration(before-after) * time.Second; d > 0 && wall(at.Add(d), loc).Equal(wall(at, loc)) {
		return "its wall-clock time comes twice (fall back): it runs at the first only"
	}
	return ""
}
