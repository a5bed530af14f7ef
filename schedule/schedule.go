// Package schedule is tickd's schedule maths: when a task ticks. Every
// replica computes the same ticks from the config alone: an interval on
// the wall clock of the task's time zone, or a cron expression read as
// cron and cronie read it, with daylight saving's gaps and repeated hours
// handled as they do.
package schedule

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

// Wall-clock schedules are computed on local wall-clock times (UTC times
// holding the local fields: see wall), then placed on the instants of
// their zone by next, which walks the zone's offset periods:
//   - a wall time that does not exist (spring-forward gap) maps to the first
//     instant after the gap, so the tick still runs (once, merged with any
//     tick there);
//   - in the repeated hour of a fall-back day, a schedule that runs more
//     often than daily (repeat) ticks at both occurrences of each wall time,
//     as Vixie cron and cronie run a job whose minute or hour field starts
//     with '*'; any other ticks at the first occurrence only.

// wall returns t's local wall-clock reading in loc, as a UTC time.
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// next returns the first instant after t whose wall-clock reading in loc
// is a tick, given after(w): the first tick's wall time strictly after wall
// time w (zero for none). It follows loc's offset periods from t's: within
// one the wall clock runs with the instants; at a spring-forward change the
// skipped wall times map to the change's instant; at a fall-back change the
// wall times the clock reads a second time tick again only when repeat.
func next(t time.Time, loc *time.Location, repeat bool, after func(w time.Time) time.Time) time.Time {
	at, floor, incl := t, wall(t, loc), false
	if start, _ := t.In(loc).ZoneBounds(); !repeat && !start.IsZero() {
		// t in the second occurrence of a repeated hour: its wall times ran.
		_, off := start.In(loc).Zone()
		_, offPrev := start.Add(-time.Nanosecond).In(loc).Zone()
		if ran := start.Add(time.Duration(offPrev) * time.Second).UTC(); offPrev > off && floor.Before(ran) {
			floor, incl = ran, true
		}
	}
	for range 1000 { // offset periods: real zones have a few a year
		_, off := at.In(loc).Zone()
		_, end := at.In(loc).ZoneBounds()
		w := floor
		if incl {
			w = w.Add(-time.Nanosecond)
		}
		if w = after(w); w.IsZero() {
			return w
		}
		x := w.Add(-time.Duration(off) * time.Second)
		if end.IsZero() || x.Before(end) {
			return x
		}
		// w lies past this period's end, where the wall clock moves from
		// before to resume.
		_, off2 := end.In(loc).Zone()
		before := end.Add(time.Duration(off) * time.Second).UTC()
		resume := end.Add(time.Duration(off2) * time.Second).UTC()
		switch {
		case resume.After(before) && w.Before(resume): // in the gap
			return end
		case resume.Before(before) && !repeat: // the repeated wall times tick once
			floor = before
		default:
			floor = resume
		}
		at, incl = end, true
	}
	return time.Time{}
}

// Every ticks at wall-clock multiples of Interval in Location: "15m" ticks
// at :00 :15 :30 :45 local time, "24h" at local midnight. Unlike robfig's
// @every it does not count from process start, so replicas agree.
type Every struct {
	Interval time.Duration
	Location *time.Location
}

// Next returns the first tick after t. An interval shorter than a day ticks
// in both occurrences of a fall-back day's repeated hour (Repeats).
func (e Every) Next(t time.Time) time.Time {
	return next(t, e.Location, e.Repeats(), func(w time.Time) time.Time { return w.Truncate(e.Interval).Add(e.Interval) })
}

// Repeats says whether e ticks again in a fall-back day's repeated hour:
// when it ticks more often than daily, as its crontab twin would.
func (e Every) Repeats() bool { return e.Interval < 24*time.Hour }

// Cron is a robfig/cron schedule evaluated on wall-clock time, so that
// daylight saving gaps and repeats follow the rules above (robfig alone
// skips a tick in a spring-forward gap).
type Cron struct {
	Spec     cron.Schedule
	Location *time.Location
	// Repeat: the schedule ticks in both occurrences of a fall-back day's
	// repeated hour. ParseCron sets it as cronie does: for an expression
	// whose minute or hour field starts with '*' (@hourly too).
	Repeat bool
}

// Repeats says whether c ticks again in a fall-back day's repeated hour.
func (c Cron) Repeats() bool { return c.Repeat }

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
	repeat := s == "@hourly"
	if ss, ok := sch.(*cron.SpecSchedule); ok && !strings.HasPrefix(s, "@") {
		crontabDays(ss, fields[len(fields)-3], fields[len(fields)-1])
		minute, hour := fields[len(fields)-5], fields[len(fields)-4]
		repeat = strings.HasPrefix(minute, "*") || strings.HasPrefix(hour, "*")
	}
	c := Cron{Spec: sch, Location: loc, Repeat: repeat}
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
	return next(t, c.Location, c.Repeat, func(w time.Time) time.Time {
		n := c.Spec.Next(w)
		for y := 5; n.IsZero() && y < cronYears; y += 5 { // robfig/cron looks 5 years ahead
			n = c.Spec.Next(w.AddDate(y, 0, 0))
		}
		return n
	})
}

// In returns s evaluated in loc: the same wall-clock rule, placed on loc's
// instants, with loc's daylight saving handled as for s's own zone. A
// Schedule that is neither Every nor Cron is returned as it is.
func In(s Schedule, loc *time.Location) Schedule {
	switch x := s.(type) {
	case Every:
		x.Location = loc
		return x
	case Cron:
		x.Location = loc
		return x
	}
	return s
}

// Location is s's zone: Every's and Cron's Location, else UTC.
func Location(s Schedule) *time.Location {
	switch x := s.(type) {
	case Every:
		return x.Location
	case Cron:
		return x.Location
	}
	return time.UTC
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
// that day), or one whose wall-clock time comes twice (fall-back): a
// schedule that runs more often than daily ticks at both, any other at the
// first only.
func DSTNote(s Schedule, at time.Time) string {
	var loc *time.Location
	moved, repeat := false, false
	switch x := s.(type) {
	case Every:
		loc, repeat = x.Location, x.Repeats()
		w := wall(at, loc)
		moved = !w.Truncate(x.Interval).Equal(w)
	case Cron:
		loc, repeat = x.Location, x.Repeat
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
	d := time.Duration(before-after) * time.Second
	switch {
	case d <= 0:
		return ""
	case wall(at.Add(d), loc).Equal(wall(at, loc)) && repeat:
		return "its wall-clock time comes twice (fall back): it runs at both, as cron runs a schedule more frequent than daily; this is the first"
	case wall(at.Add(d), loc).Equal(wall(at, loc)):
		return "its wall-clock time comes twice (fall back): it runs at the first only, as cron runs a fixed time"
	case wall(at.Add(-d), loc).Equal(wall(at, loc)):
		return "the second time its wall-clock time comes (fall back): a schedule more frequent than daily runs at both, as cron does"
	}
	return ""
}
