package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return v
}

// Each case lists the ticks after From, in UTC, worked out by hand from the
// zone's rules.
func TestScheduleTable(t *testing.T) {
	cases := []struct {
		name  string
		zone  string
		every time.Duration
		cron  string
		from  string
		want  []string
	}{
		{name: "every 15m aligned to the quarter hour", zone: "UTC", every: 15 * time.Minute,
			from: "2026-11-22T10:07:13Z", want: []string{"2026-11-22T10:15:00Z", "2026-11-22T10:30:00Z", "2026-11-22T10:45:00Z"}},
		{name: "every 1h aligned to the local hour in a +05:30 zone", zone: "Asia/Kolkata", every: time.Hour,
			from: "2026-11-22T10:07:00Z", want: []string{"2026-11-22T10:30:00Z", "2026-11-22T11:30:00Z"}},
		{name: "every 24h is local midnight", zone: "Europe/Berlin", every: 24 * time.Hour,
			from: "2026-11-22T10:00:00Z", want: []string{"2026-11-22T23:00:00Z", "2026-11-23T23:00:00Z"}},
		{name: "from a tick, the next one", zone: "UTC", every: 15 * time.Minute,
			from: "2026-11-22T10:15:00Z", want: []string{"2026-11-22T10:30:00Z"}},

		// Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{name: "Berlin spring-forward: daily 02:30 runs at the first instant after the gap", zone: "Europe/Berlin", cron: "30 2 * * *",
			from: "2026-03-28T12:00:00Z", want: []string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{name: "Berlin spring-forward: every 15m, the gap's ticks collapse into one", zone: "Europe/Berlin", every: 15 * time.Minute,
			from: "2026-03-29T00:40:00Z", want: []string{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"}},
		{name: "Berlin fall-back: every 30m ticks in both occurrences of the repeated hour", zone: "Europe/Berlin", every: 30 * time.Minute,
			from: "2026-10-24T23:50:00Z", want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},
		{name: "Berlin fall-back: every 15m leaves no 75-minute hole", zone: "Europe/Berlin", every: 15 * time.Minute,
			from: "2026-10-25T00:40:00Z", want: []string{"2026-10-25T00:45:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z"}},
		{name: "Berlin fall-back: */15 * * * * as every 15m", zone: "Europe/Berlin", cron: "*/15 * * * *",
			from: "2026-10-25T00:40:00Z", want: []string{"2026-10-25T00:45:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z"}},
		{name: "Berlin fall-back: */20 2 * * * (minute starts with *) runs in both", zone: "Europe/Berlin", cron: "*/20 2 * * *",
			from: "2026-10-24T12:00:00Z", want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z",
				"2026-10-25T01:00:00Z", "2026-10-25T01:20:00Z", "2026-10-25T01:40:00Z", "2026-10-26T01:00:00Z"}},
		{name: "Berlin fall-back: 30 * * * * (hour starts with *) runs in both", zone: "Europe/Berlin", cron: "30 * * * *",
			from: "2026-10-25T00:00:00Z", want: []string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"}},
		{name: "Berlin fall-back: daily 02:30 runs once", zone: "Europe/Berlin", cron: "30 2 * * *",
			from: "2026-10-24T12:00:00Z", want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{name: "Berlin fall-back: 0,30 2 * * * (fixed minutes and hour) runs once", zone: "Europe/Berlin", cron: "0,30 2 * * *",
			from: "2026-10-24T12:00:00Z", want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:00:00Z"}},
		{name: "Berlin fall-back: every 24h runs once", zone: "Europe/Berlin", every: 24 * time.Hour,
			from: "2026-10-24T12:00:00Z", want: []string{"2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"}},
		{name: "Berlin fall-back: started inside the repeated hour's first occurrence", zone: "Europe/Berlin", every: 15 * time.Minute,
			from: "2026-10-25T00:50:00Z", want: []string{"2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z"}},
		{name: "Berlin fall-back: started inside the repeated hour's second occurrence", zone: "Europe/Berlin", every: 15 * time.Minute,
			from: "2026-10-25T01:10:00Z", want: []string{"2026-10-25T01:15:00Z", "2026-10-25T01:30:00Z"}},
		{name: "Berlin fall-back: daily 02:30 from inside the second occurrence", zone: "Europe/Berlin", cron: "30 2 * * *",
			from: "2026-10-25T01:10:00Z", want: []string{"2026-10-26T01:30:00Z"}},

		// America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
		{name: "New York spring-forward: daily 02:00", zone: "America/New_York", cron: "0 2 * * *",
			from: "2026-03-07T12:00:00Z", want: []string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{name: "New York fall-back: 0 * * * * runs at both 01:00s", zone: "America/New_York", cron: "0 * * * *",
			from: "2026-11-01T04:30:00Z", want: []string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{name: "New York fall-back: @hourly runs at both 01:00s", zone: "America/New_York", cron: "@hourly",
			from: "2026-11-01T04:30:00Z", want: []string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{name: "New York fall-back: daily 01:30 runs once", zone: "America/New_York", cron: "30 1 * * *",
			from: "2026-10-31T12:00:00Z", want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},

		// Australia/Lord_Howe shifts by 30 minutes: 2026-10-04 02:00 +10:30 -> 02:30 +11;
		// 2026-04-05 02:00 +11 -> 01:30 +10:30.
		{name: "Lord Howe spring-forward (30 min)", zone: "Australia/Lord_Howe", every: 15 * time.Minute,
			from: "2026-10-03T15:20:00Z", want: []string{"2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z"}},
		{name: "Lord Howe fall-back (30 min): every 15m runs in both", zone: "Australia/Lord_Howe", every: 15 * time.Minute,
			from: "2026-04-04T14:10:00Z", want: []string{"2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
				"2026-04-04T15:00:00Z", "2026-04-04T15:15:00Z", "2026-04-04T15:30:00Z"}},
		{name: "Lord Howe fall-back (30 min): daily 01:45 runs once", zone: "Australia/Lord_Howe", cron: "45 1 * * *",
			from: "2026-04-04T12:00:00Z", want: []string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},

		// America/Havana changes at midnight: 2026-03-08 00:00 CST -> 01:00 CDT;
		// 2026-11-01 01:00 CDT -> 00:00 CST.
		{name: "Havana spring-forward: daily midnight runs at 01:00", zone: "America/Havana", cron: "0 0 * * *",
			from: "2026-03-07T12:00:00Z", want: []string{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"}},
		{name: "Havana spring-forward: every 30m, the gap collapses into 01:00", zone: "America/Havana", every: 30 * time.Minute,
			from: "2026-03-08T04:40:00Z", want: []string{"2026-03-08T05:00:00Z", "2026-03-08T05:30:00Z"}},
		{name: "Havana fall-back: every 30m runs in both 00:00 hours", zone: "America/Havana", every: 30 * time.Minute,
			from: "2026-11-01T03:50:00Z", want: []string{"2026-11-01T04:00:00Z", "2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z",
				"2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z"}},
		{name: "Havana fall-back: daily 00:30 runs once", zone: "America/Havana", cron: "30 0 * * *",
			from: "2026-10-31T12:00:00Z", want: []string{"2026-11-01T04:30:00Z", "2026-11-02T05:30:00Z"}},
		{name: "Havana fall-back: every 24h (local midnight) runs once", zone: "America/Havana", every: 24 * time.Hour,
			from: "2026-10-31T12:00:00Z", want: []string{"2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"}},

		{name: "cron with seconds", zone: "UTC", cron: "*/10 * * * * *",
			from: "2026-11-22T10:00:03Z", want: []string{"2026-11-22T10:00:10Z", "2026-11-22T10:00:20Z"}},
		{name: "cron descriptor", zone: "Europe/Berlin", cron: "@daily",
			from: "2026-11-22T10:00:00Z", want: []string{"2026-11-22T23:00:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loc := mustLoc(t, c.zone)
			var s Schedule = Every{Interval: c.every, Location: loc}
			if c.cron != "" {
				cs, err := ParseCron(c.cron, loc)
				if err != nil {
					t.Fatal(err)
				}
				s = cs
			}
			at := utc(c.from)
			for i, w := range c.want {
				at = s.Next(at)
				if !at.Equal(utc(w)) {
					t.Fatalf("tick %d: got %s (%s local), want %s", i, at.UTC().Format(time.RFC3339), at.In(loc).Format(time.RFC3339), w)
				}
			}
		})
	}
}

func TestScheduleSameOnEveryReplica(t *testing.T) {
	// Replicas whose timers fire at different moments compute the same ticks.
	s := Every{Interval: 15 * time.Minute, Location: time.UTC}
	a := s.Next(utc("2026-11-22T10:00:00Z").Add(-3 * time.Second))
	b := s.Next(utc("2026-11-22T09:59:59Z"))
	if !a.Equal(b) || !a.Equal(utc("2026-11-22T10:00:00Z")) {
		t.Fatalf("%v %v", a, b)
	}
}

func TestParseCronErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"@every 5m":             "@every counts from process start",
		"CRON_TZ=UTC * * * * *": "set the zone with timezone",
		"* * * * * * *":         "has 7 fields",
		"* * * *":               "has 4 fields",
		"61 * * * *":            "bad cron expression",
		"@sometimes":            "bad cron expression",
	} {
		_, err := ParseCron(spec, time.UTC)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", spec, err, want)
		}
	}
}

func TestPrev(t *testing.T) {
	s := Every{Interval: 15 * time.Minute, Location: time.UTC}
	now := utc("2026-11-22T10:07:00Z")
	if got := Prev(s, now, 15*time.Minute); !got.Equal(utc("2026-11-22T10:00:00Z")) {
		t.Fatalf("prev %v", got)
	}
	if got := Prev(s, now, 5*time.Minute); !got.IsZero() {
		t.Fatalf("prev beyond the window: %v", got)
	}
}

func TestSpreadOffset(t *testing.T) {
	seen := map[time.Duration]bool{}
	for _, e := range []string{"a", "b", "c", "d", "e", "f"} {
		off := SpreadOffset("task", e, 2*time.Minute)
		if off < 0 || off >= 2*time.Minute {
			t.Fatalf("offset %v", off)
		}
		if off != SpreadOffset("task", e, 2*time.Minute) {
			t.Fatal("not deterministic")
		}
		seen[off] = true
	}
	if len(seen) < 5 {
		t.Fatalf("offsets not spread: %v", seen)
	}
	if SpreadOffset("t", "a", 0) != 0 {
		t.Fatal("no spread, no offset")
	}
}

// TestDSTNote: the ticks daylight saving moved or kept from running twice
// are marked; others are not.
func TestDSTNote(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	cronAt := func(spec string) Schedule {
		c, err := ParseCron(spec, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		name string
		s    Schedule
		at   string
		want string
	}{
		{"daily 02:30 in the spring gap", cronAt("30 2 * * *"), "2026-03-29T01:00:00Z", "moved by daylight saving"},
		{"daily 02:30 the day after", cronAt("30 2 * * *"), "2026-03-30T00:30:00Z", ""},
		{"daily 03:00 on the spring day is not moved", cronAt("0 3 * * *"), "2026-03-29T01:00:00Z", ""},
		{"every 15m: the gap's ticks collapse into 03:00", Every{15 * time.Minute, berlin}, "2026-03-29T01:00:00Z", ""},
		{"daily 02:30 in the repeated hour", cronAt("30 2 * * *"), "2026-10-25T00:30:00Z", "runs at the first only"},
		{"every 1h at 02:00 in the repeated hour", Every{time.Hour, berlin}, "2026-10-25T00:00:00Z", "runs at both"},
		{"every 1h at 02:00, the second time", Every{time.Hour, berlin}, "2026-10-25T01:00:00Z", "the second time"},
		{"*/15 * * * * at 02:15, the second time", cronAt("*/15 * * * *"), "2026-10-25T01:15:00Z", "the second time"},
		{"a plain day", cronAt("30 2 * * *"), "2026-11-24T01:30:00Z", ""},
	} {
		got := DSTNote(c.s, utc(c.at))
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestScheduleOverAYear walks a year of ticks in zones with every kind of
// daylight-saving change (an hour, 30 minutes, at midnight, southern, none)
// and holds the repeated-hour rule: every 15m never leaves more than 15
// minutes between ticks, nor ticks twice at one instant; a fixed daily time
// ticks once on each local date.
func TestScheduleOverAYear(t *testing.T) {
	from, to := utc("2026-01-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Havana",
		"America/Santiago", "Pacific/Chatham", "Australia/Sydney", "Asia/Kolkata", "UTC"} {
		t.Run(zone, func(t *testing.T) {
			loc := mustLoc(t, zone)
			prev := from
			for at := (Every{15 * time.Minute, loc}).Next(from); at.Before(to); at = (Every{15 * time.Minute, loc}).Next(at) {
				if d := at.Sub(prev); d <= 0 || d > 15*time.Minute {
					t.Fatalf("every 15m: %v between %s and %s", d, prev.In(loc).Format(time.RFC3339), at.In(loc).Format(time.RFC3339))
				}
				prev = at
			}
			daily, err := ParseCron("30 2 * * *", loc)
			if err != nil {
				t.Fatal(err)
			}
			days := map[string]int{}
			for at := daily.Next(from); at.Before(to); at = daily.Next(at) {
				days[at.In(loc).Format(time.DateOnly)]++
			}
			for d, n := range days {
				if n != 1 {
					t.Errorf("30 2 * * * ran %d times on %s", n, d)
				}
			}
			if len(days) < 364 {
				t.Errorf("30 2 * * * ran on %d days of 2026", len(days))
			}
		})
	}
}
