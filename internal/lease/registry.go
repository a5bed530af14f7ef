package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// RegisterTasks records that this replica runs ts, now: a replica calls it
// when its tasks change and every few minutes.
func (f Fleet) RegisterTasks(ctx context.Context, ts []driver.TaskInfo) error {
	s := f.s
	if len(ts) == 0 {
		return nil
	}
	now := s.clock.Now().UTC()
	stamped := make([]driver.TaskInfo, len(ts))
	for i, t := range ts {
		t.Seen, t.By = now, s.opts.Replica
		stamped[i] = t
	}
	if err := s.b.RegisterTasks(ctx, stamped); err != nil {
		return fmt.Errorf("register tasks: %w", err)
	}
	return nil
}

// Registry returns every task the registry remembers, by name.
func (f Fleet) Registry(ctx context.Context) ([]driver.TaskInfo, error) {
	s := f.s
	out, err := s.b.Registry(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the task registry: %w", err)
	}
	slices.SortFunc(out, func(a, b driver.TaskInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ForgetTask takes task out of the registry: it is gone on purpose, and
// no longer flagged as not firing. It says whether the registry had it. A
// replica that still runs the task registers it again.
func (f Fleet) ForgetTask(ctx context.Context, task string) (bool, error) {
	s := f.s
	ok, err := s.b.ForgetTask(ctx, task)
	if err != nil {
		return false, fmt.Errorf("forget task %s: %w", task, err)
	}
	return ok, nil
}

// Claim says whether this replica is the first to claim name within ttl:
// the replicas sharing a store do a thing once between them (a tick's
// heartbeat ping). A data loss forgets the claims.
func (f Fleet) Claim(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	s := f.s
	ok, err := s.b.Claim(ctx, name, ttl)
	if err != nil {
		return false, fmt.Errorf("claim %q: %w", name, err)
	}
	return ok, nil
}
