package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
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

// Info is what the task registry keeps of t (driver.Store.RegisterTasks).
func (t *Task) Info() driver.TaskInfo {
	return driver.TaskInfo{Name: t.Name, Schedule: t.ScheduleText(), Timezone: t.Location.String()}
}
