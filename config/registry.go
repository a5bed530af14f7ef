package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
)

// ScheduleText is t's schedule as written in its config: `every 15m` or
// `cron "*/15 * * * *"`.
func (t *Task) ScheduleText() string {
	if t.Cron != "" {
		return "cron " + strconv.Quote(t.Cron)
	}
	return "every " + ShortDuration(t.Every)
}

// ShortDuration is d as a config writes it: 15m, 1h, 1h30m, 90s, 1500ms.
func ShortDuration(d time.Duration) string {
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

// RegisteredTask is a task the registry remembers but a config does not
// list, rebuilt from what the registry kept (its schedule as written and
// zone, the other keys their defaults): enough to judge its history and
// flag it as not firing. Its action is none: it is never run.
func RegisteredTask(ti driver.TaskInfo) (Task, error) {
	t := DefaultTask()
	t.Name = ti.Name
	loc, err := time.LoadLocation(ti.Timezone)
	if err != nil {
		return t, fmt.Errorf("task %s in the registry: timezone %q: %w", ti.Name, ti.Timezone, err)
	}
	t.Timezone, t.Location = ti.Timezone, loc
	switch kind, spec, _ := strings.Cut(ti.Schedule, " "); kind {
	case "every":
		if t.Every, err = time.ParseDuration(spec); err != nil || t.Every <= 0 {
			return t, fmt.Errorf("task %s in the registry: schedule %q", ti.Name, ti.Schedule)
		}
		t.Schedule = schedule.Every{Interval: t.Every, Location: loc}
	case "cron":
		if t.Cron, err = strconv.Unquote(spec); err != nil {
			return t, fmt.Errorf("task %s in the registry: schedule %q", ti.Name, ti.Schedule)
		}
		if t.Schedule, err = schedule.ParseCron(t.Cron, loc); err != nil {
			return t, fmt.Errorf("task %s in the registry: %w", ti.Name, err)
		}
	default:
		return t, fmt.Errorf("task %s in the registry: schedule %q", ti.Name, ti.Schedule)
	}
	return t, nil
}

// Orphan is a task of the registry that a config does not list.
type Orphan struct {
	Task
	Info driver.TaskInfo
}

// Orphans returns the registry's tasks that cfg does not list, rebuilt
// (orphanOf).
func Orphans(cfg *Config, reg []driver.TaskInfo) []Orphan {
	var out []Orphan
	for _, ti := range reg {
		if _, ok := cfg.Task(ti.Name); !ok {
			out = append(out, orphanOf(ti))
		}
	}
	return out
}

// orphanOf is the registry's task ti rebuilt (RegisteredTask); one the
// registry kept in a form this version cannot read is rebuilt with an
// hourly schedule in UTC, so it is still shown.
func orphanOf(ti driver.TaskInfo) Orphan {
	t, err := RegisteredTask(ti)
	if err != nil {
		t = DefaultTask()
		t.Name, t.Every, t.Timezone, t.Location = ti.Name, time.Hour, "UTC", time.UTC
		t.Schedule = schedule.Every{Interval: time.Hour, Location: time.UTC}
	}
	return Orphan{Task: t, Info: ti}
}

// ForgottenTask is a task no config lists and the registry no longer
// knows (tickd forget), as far as its history needs it: its name, in UTC,
// with a schedule that expects no tick (its history is read as it was
// recorded; nothing is flagged missed).
func ForgottenTask(name string) *Task {
	t := DefaultTask()
	t.Name, t.Timezone, t.Location, t.Schedule = name, "UTC", time.UTC, never{}
	return &t
}

// Forgotten says whether t is a ForgottenTask: nothing is expected of it.
func (t *Task) Forgotten() bool { _, ok := t.Schedule.(never); return ok }

// never is a schedule without ticks.
type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }

// RunnerIDs are the ids of the replicas of rs (those whose announcement is
// current) that run task.
func RunnerIDs(rs []driver.Replica, task string) []string {
	var ids []string
	for _, r := range rs {
		if slices.Contains(r.Tasks, task) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}
