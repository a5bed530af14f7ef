package report

import (
	"context"
	"fmt"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// TaskHistory is what history reads of one task.
type TaskHistory struct {
	Task     *scheduler.Task
	Ticks    []scheduler.TickView
	Health   scheduler.Health
	Failures []lease.Failure
	Actions  []lease.Action
}

func ReadHistory(ctx context.Context, store *lease.Store, t *scheduler.Task, limit int, now time.Time) (TaskHistory, error) {
	h := TaskHistory{Task: t}
	past, err := scheduler.ReadPast(ctx, store, t, limit)
	if err != nil {
		return h, fmt.Errorf("read the history of %s: %w", t.Name, err)
	}
	h.Ticks, h.Health = t.Assess(now, past)
	if o, ok := unlisted(ctx, store, t); ok {
		h.Ticks, h.Health = o.Assess(now, past)
	}
	h.Ticks = h.Ticks[:min(len(h.Ticks), limit)]
	h.Actions = past.Actions[:min(len(past.Actions), limit)]
	if h.Failures, err = store.Failures(ctx, t.Name, limit); err != nil {
		return h, err
	}
	return h, nil
}

// unlisted returns t as the task registry remembers it when t is a task no
// config lists (scheduler.RegisteredTask), so that its flag says so.
func unlisted(ctx context.Context, store *lease.Store, t *scheduler.Task) (*scheduler.Orphan, bool) {
	if t.Command != nil || t.URL != "" || t.Handler != "" {
		return nil, false // a config's task: it has an action
	}
	reg, err := store.Registry(ctx)
	if err != nil {
		return nil, false
	}
	for _, ti := range reg {
		if ti.Name == t.Name {
			return &scheduler.Orphan{Task: *t, Info: ti}, true
		}
	}
	return nil, false
}
