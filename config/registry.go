package config

import (
	"strconv"
	"strings"
	"time"
)

// ScheduleText is t's schedule as written in its config: `every 15m` or
// `cron "*/15 * * * *"`.
func (t *Task) ScheduleText() string {
	if t.Cron != "" {
		return "cron " + strconv.Quote(t.Cron)
	}
	return "every " + shortDuration(t.Every)
}

// shortDuration is d as a config writes it: 15m, 1h, 1h30m, 90s, 1500ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
