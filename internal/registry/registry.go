// Package registry is the fleet's task registry seen as tasks: the tasks
// it remembers that a config does not list (orphans, rebuilt from what it
// kept), the tasks it no longer knows (forgotten), and the replicas that
// run a task.
package registry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
)

// RegisteredTask is a task the registry remembers but a config does not
// list, rebuilt from what the registry kept (its schedule as written and
// zone, the other keys their defaults): enough to judge its history and
// flag it as not firing. Its action is none: it is never run.
func RegisteredTask(ti driver.TaskInfo) (config.Task, error) {
	t := config.DefaultTask()
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
	config.Task
	Info driver.TaskInfo
}

// Orphans returns the registry's tasks that cfg does not list, rebuilt
// (orphanOf).
func Orphans(cfg *config.Config, reg []driver.TaskInfo) []Orphan {
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
		t = config.DefaultTask()
		t.Name, t.Every, t.Timezone, t.Location = ti.Name, time.Hour, "UTC", time.UTC
		t.Schedule = schedule.Every{Interval: time.Hour, Location: time.UTC}
	}
	return Orphan{Task: t, Info: ti}
}

// ForgottenTask is a task no config lists and the registry no longer
// knows (tickd forget), as far as its history needs it: its name, in UTC,
// with a schedule that expects no tick (its history is read as it was
// recorded; nothing is flagged missed).
func ForgottenTask(name string) *config.Task {
	t := config.DefaultTask()
	t.Name, t.Timezone, t.Location, t.Schedule = name, "UTC", time.UTC, never{}
	return &t
}

// Forgotten says whether t is a ForgottenTask: nothing is expected of it.
func Forgotten(t *config.Task) bool { _, ok := t.Schedule.(never); return ok }

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
