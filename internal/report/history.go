package report

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/registry"
	"github.com/tickd/tickd/lease/driver"
)

// TaskHistory is what history reads of one task.
type TaskHistory struct {
	Task     *config.Task
	Ticks    []history.TickView
	Health   history.Health
	Failures []driver.Failure
	Actions  []driver.Action
}

func ReadHistory(ctx context.Context, store *lease.Store, t *config.Task, limit int, now time.Time) (TaskHistory, error) {
	h := TaskHistory{Task: t}
	past, err := history.ReadPast(ctx, store, t, limit)
	if err != nil {
		return h, fmt.Errorf("read the history of %s: %w", t.Name, err)
	}
	h.Ticks, h.Health = history.Assess(t, now, past)
	if o, ok := unlisted(ctx, store, t); ok {
		h.Ticks, h.Health = history.AssessOrphan(o, now, past)
	}
	h.Ticks = h.Ticks[:min(len(h.Ticks), limit)]
	h.Actions = past.Actions[:min(len(past.Actions), limit)]
	if h.Failures, err = store.Fleet().Failures(ctx, t.Name, limit); err != nil {
		return h, err
	}
	return h, nil
}

// unlisted returns t as the task registry remembers it when t is a task no
// config lists (registry.RegisteredTask), so that its flag says so.
func unlisted(ctx context.Context, store *lease.Store, t *config.Task) (*registry.Orphan, bool) {
	if t.Command != nil || t.URL != "" || t.Handler != "" {
		return nil, false // a config's task: it has an action
	}
	o, err := Unlisted(ctx, store, &config.Config{}, t.Name)
	if err != nil || o == nil {
		return nil, false
	}
	return &registry.Orphan{Task: *t, Info: o.Info}, true
}

// ErrUnknownTask is wrapped by FindTask's error for a task that neither the
// config, the task registry nor the history knows.
var ErrUnknownTask = errors.New("unknown task")

// FindTask returns the config's task named task, or else the task as the
// task registry remembers it (a replica ran it; no config lists it any
// more), or else a task forgotten (tickd forget) whose history is still
// kept: its history and status are still there to read.
func FindTask(ctx context.Context, store *lease.Store, cfg *config.Config, task string) (*config.Task, error) {
	if t, ok := cfg.Task(task); ok {
		return t, nil
	}
	o, err := Unlisted(ctx, store, cfg, task)
	if err != nil {
		return nil, err
	}
	if o != nil {
		return &o.Task, nil
	}
	as, err := store.Fleet().Actions(ctx, task, 1)
	if err != nil {
		return nil, err
	}
	ts, err := store.Fleet().Ticks(ctx, task, 1)
	if err != nil {
		return nil, err
	}
	if len(as) == 0 && len(ts) == 0 {
		return nil, fmt.Errorf("%w: no task %q in %s, nor in the task registry, nor in the history", ErrUnknownTask, task, cfg.Path)
	}
	return registry.ForgottenTask(task), nil
}

// Unlisted returns the task named name as the task registry remembers it
// (rebuilt as registry.Orphans does) when cfg does not list it; nil when cfg
// lists it or the registry does not know it. The one lookup of such a
// task, for the commands, the console and the reports.
func Unlisted(ctx context.Context, store *lease.Store, cfg *config.Config, name string) (*registry.Orphan, error) {
	if _, ok := cfg.Task(name); ok {
		return nil, nil
	}
	reg, err := store.Fleet().Registry(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range registry.Orphans(cfg, reg) {
		if o.Name == name {
			return &o, nil
		}
	}
	return nil, nil
}
