package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
)

// cronMacros says the cron macros in words.
var cronMacros = map[string]string{
	"@hourly":   "every hour, on the hour",
	"@daily":    "every day at midnight",
	"@midnight": "every day at midnight",
	"@weekly":   "every Sunday at midnight",
	"@monthly":  "on the first of every month at midnight",
	"@yearly":   "every 1 January at midnight",
	"@annually": "every 1 January at midnight",
}

// words is t's schedule in words: an interval, or the common cron forms;
// other cron expressions are said by their next ticks.
func words(t *config.Task) string {
	if t.Cron == "" {
		return "every " + everyWords(t.Every)
	}
	if w, ok := cronMacros[t.Cron]; ok {
		return w
	}
	if f := strings.Fields(t.Cron); len(f) == 5 {
		if w := cronWords(f[0], f[1], f[2], f[3], f[4]); w != "" {
			return w
		}
	}
	return "as the cron expression says (see the next ticks)"
}

// cronWords says the common five-field forms in words, or returns "".
func cronWords(minute, hour, dom, month, dow string) string {
	everyDay := dom == "*" && month == "*"
	switch {
	case isNumber(minute) && isNumber(hour) && everyDay:
		at := fmt.Sprintf("%02s:%02s", hour, minute)
		switch dow {
		case "*":
			return "every day at " + at
		case "1-5":
			return "every weekday at " + at
		}
		return "at " + at + " on days of the week " + dow
	case hour != "*" || !everyDay || dow != "*":
		return ""
	case isNumber(minute):
		return "every hour at minute " + minute
	case strings.HasPrefix(minute, "*/"):
		return "every " + minute[2:] + " minutes"
	}
	return ""
}

func everyWords(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return plural(int(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return plural(int(d/time.Second), "second")
}

func plural(n int, unit string) string {
	if n == 1 {
		return unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
