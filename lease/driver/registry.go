package driver

import "time"

// TaskInfo is what the task registry remembers of a task some replica ran:
// enough to say, once no config lists it, that it stopped firing, and what
// it was. The registry is kept apart from the leases (prefix:tasks), read
// by status, history, the console and every replica's health metrics,
// whatever their config, until an operator forgets the task (the store's ForgetTask).
type TaskInfo struct {
	Name     string
	Schedule string // as written: `every 15m0s`, `cron "*/5 * * * *"`
	Timezone string
	Seen     time.Time // when a replica last registered it
	By       string    // that replica
}

// DefaultHistory is what the history keeps unless told otherwise: a week
// of 15-minute ticks, 50 failed runs and 100 operator actions a task (and
// as many for the fleet's lists).
func DefaultHistory() Retention {
	return Retention{Ticks: 672, Age: 7 * 24 * time.Hour, Failures: 50, Actions: 100}
}

// MinTTL is the shortest lease TTL a holder can keep: renewed every TTL/3,
// a shorter one leaves too little time for a renewal round to arrive.
const MinTTL = 1500 * time.Millisecond

// ValidPrefix reports whether p can be used as a key prefix: letters, digits
// and . _ - : only, so that it cannot break a driver's key layout (Redis's
// hash tags).
func ValidPrefix(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !plain(p[i]) && p[i] != ':' {
			return false
		}
	}
	return true
}

// PauseInfo is who paused a task, when, why and until when.
type PauseInfo struct {
	By     string
	At     time.Time
	Reason string
	Until  time.Time // zero: until resumed
}
