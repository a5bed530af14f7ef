package schedule

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCrontabDayRule: cron expressions mean what crontab(5) says. Day of
// month and day of week are OR-ed only when both are restricted; a field
// that starts with '*' ("*/7" too) is unrestricted; 0 and 7 are Sunday.
// Each case's ticks were worked out by hand from the calendar.
func TestCrontabDayRule(t *testing.T) {
	cases := []struct {
		name, cron, from string
		want             []string
	}{
		// crontab(5)'s own examples.
		{"man: 5 past midnight every day", "5 0 * * *", "2026-11-24T12:00:00Z",
			[]string{"2026-11-25T00:05:00Z", "2026-11-26T00:05:00Z"}},
		{"man: 2:15pm on the first of every month", "15 14 1 * *", "2026-11-24T12:00:00Z",
			[]string{"2026-12-01T14:15:00Z", "2027-01-01T14:15:00Z"}},
		{"man: 10pm on weekdays", "0 22 * * 1-5", "2026-11-27T23:00:00Z", // a Friday
			[]string{"2026-11-30T22:00:00Z", "2026-12-01T22:00:00Z"}},
		{"man: 23 minutes after every even hour", "23 0-23/2 * * *", "2026-11-24T21:00:00Z",
			[]string{"2026-11-24T22:23:00Z", "2026-11-25T00:23:00Z"}},
		{"man: 5 after 4 every sunday", "5 4 * * sun", "2026-11-24T00:00:00Z",
			[]string{"2026-11-29T04:05:00Z", "2026-12-06T04:05:00Z"}},
		{"man: 4:30 on the 1st and 15th plus every Friday", "30 4 1,15 * 5", "2026-11-24T00:00:00Z",
			[]string{"2026-11-27T04:30:00Z", "2026-12-01T04:30:00Z", "2026-12-04T04:30:00Z", "2026-12-11T04:30:00Z", "2026-12-15T04:30:00Z"}},

		// A field starting with '*' is unrestricted: AND, not OR.
		{"first Sunday of the month (*/7 is unrestricted)", "0 0 1-7 * */7", "2026-11-24T00:00:00Z",
			[]string{"2026-12-06T00:00:00Z", "2027-01-03T00:00:00Z", "2027-02-07T00:00:00Z"}},
		{"every 10th day on Mondays only (*/10 is unrestricted)", "0 0 */10 * 1", "2026-11-24T00:00:00Z",
			[]string{"2026-12-21T00:00:00Z", "2027-01-11T00:00:00Z", "2027-02-01T00:00:00Z"}},
		{"both restricted: the 13th, plus every Friday", "0 0 13 * 5", "2026-11-24T00:00:00Z",
			[]string{"2026-11-27T00:00:00Z", "2026-12-04T00:00:00Z", "2026-12-11T00:00:00Z", "2026-12-13T00:00:00Z"}},
		{"1-31 is restricted: OR with Sunday gives every day", "0 0 1-31 * 0", "2026-11-24T00:00:00Z",
			[]string{"2026-11-25T00:00:00Z", "2026-11-26T00:00:00Z"}},
		{"? is unrestricted, like *", "0 0 ? * 1", "2026-11-24T00:00:00Z",
			[]string{"2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}},

		// 0 and 7 are Sunday.
		{"7 is Sunday", "0 12 * * 7", "2026-11-24T00:00:00Z",
			[]string{"2026-11-29T12:00:00Z", "2026-12-06T12:00:00Z"}},
		{"5-7 is Friday to Sunday", "0 12 * * 5-7", "2026-11-24T00:00:00Z",
			[]string{"2026-11-27T12:00:00Z", "2026-11-28T12:00:00Z", "2026-11-29T12:00:00Z", "2026-12-04T12:00:00Z"}},

		// Rare but possible: leap days.
		{"29 February fires in leap years", "0 0 29 2 *", "2026-11-24T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"29 February that is a Sunday (AND: */7), past robfig's 5 years", "0 0 29 2 */7", "2026-11-24T00:00:00Z",
			[]string{"2032-02-29T00:00:00Z", "2060-02-29T00:00:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseCron(c.cron, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(c.from)
			for i, w := range c.want {
				at = s.Next(at)
				if !at.Equal(utc(w)) {
					t.Fatalf("%q tick %d after %s: %v, want %s", c.cron, i+1, c.from, at.UTC().Format(time.RFC3339), w)
				}
			}
		})
	}
}

// TestCrontabAgainstTheManPage holds Cron.Next to a literal reading of
// crontab(5), minute by minute over two years, for expressions that mix
// restricted and unrestricted day fields.
func TestCrontabAgainstTheManPage(t *testing.T) {
	for _, expr := range []string{
		"0 0 1-7 * */7", "30 4 1,15 * 5", "0 6 */2 * 1-5", "15 3 * * */3", "0 0 13 * 5",
		"0 12 10-20/5 * 0", "0 0 * 2 *", "45 23 31 * *", "0 0 1 */3 mon", "0 9 ? * 7",
	} {
		s, err := ParseCron(expr, time.UTC)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		m := manPageMatcher(t, expr)
		from := utc("2026-01-01T00:00:00Z")
		next := s.Next(from.Add(-time.Minute))
		for at := from; at.Before(from.AddDate(2, 0, 0)); at = at.Add(time.Minute) {
			if m(at) != at.Equal(next) {
				t.Fatalf("%q at %v: crontab(5) says %v, Cron.Next says next tick %v", expr, at, m(at), next)
			}
			if at.Equal(next) {
				next = s.Next(at)
			}
		}
	}
}

// manPageMatcher reads a 5-field expression as crontab(5) describes it,
// independently of robfig/cron: lists, ranges, steps, names, 0 or 7 for
// Sunday; the day rule ORs day of month and day of week only when neither
// field starts with '*'.
func manPageMatcher(t *testing.T, expr string) func(time.Time) bool {
	f := strings.Fields(expr)
	names := map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
	set := func(field string, lo, hi int) map[int]bool {
		out := map[int]bool{}
		for _, part := range strings.Split(field, ",") {
			rng, step := part, 1
			if i := strings.Index(part, "/"); i >= 0 {
				rng = part[:i]
				step, _ = strconv.Atoi(part[i+1:])
			}
			a, b := lo, hi
			if rng != "*" && rng != "?" {
				ends := strings.SplitN(rng, "-", 2)
				num := func(s string) int {
					if n, ok := names[strings.ToLower(s)]; ok {
						return n
					}
					n, err := strconv.Atoi(s)
					if err != nil {
						t.Fatalf("%q: %v", expr, err)
					}
					return n
				}
				a, b = num(ends[0]), num(ends[0])
				if len(ends) == 2 {
					b = num(ends[1])
				} else if step > 1 {
					b = hi
				}
			}
			for v := a; v <= b; v += step {
				out[v] = true
			}
		}
		return out
	}
	minute, hour, dom, month, dow := set(f[0], 0, 59), set(f[1], 0, 23), set(f[2], 1, 31), set(f[3], 1, 12), set(f[4], 0, 7)
	if dow[7] {
		dow[0] = true
	}
	domStar := strings.HasPrefix(f[2], "*") || strings.HasPrefix(f[2], "?")
	dowStar := strings.HasPrefix(f[4], "*") || strings.HasPrefix(f[4], "?")
	return func(at time.Time) bool {
		if !minute[at.Minute()] || !hour[at.Hour()] || !month[int(at.Month())] {
			return false
		}
		d, w := dom[at.Day()], dow[int(at.Weekday())]
		if domStar || dowStar {
			return d && w
		}
		return d || w
	}
}

// TestCronThatCanNeverFire: an expression no date matches is refused;
// one that fires only in leap years is not.
func TestCronThatCanNeverFire(t *testing.T) {
	for _, expr := range []string{"0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 */7"} {
		if _, err := ParseCron(expr, time.UTC); err == nil || !strings.Contains(err.Error(), "can never fire") {
			t.Errorf("%q: %v, want it refused as never firing", expr, err)
		}
	}
	for _, expr := range []string{"0 0 29 2 *", "0 0 30 2 1", "0 0 29 2 */7"} {
		if _, err := ParseCron(expr, time.UTC); err != nil {
			t.Errorf("%q: %v, want it accepted", expr, err)
		}
	}
}
