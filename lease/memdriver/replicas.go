package memdriver

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

func (b *memDriver) SetPaused(_ context.Context, task string, p *driver.PauseInfo) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p != nil {
		b.pausedSet[task] = *p
	} else {
		delete(b.pausedSet, task)
	}
	return nil
}

func (b *memDriver) EndPause(_ context.Context, task string, p driver.PauseInfo) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.pausedSet[task]; ok && cur == p {
		delete(b.pausedSet, task)
	}
	return nil
}

func (b *memDriver) Paused(context.Context) (map[string]driver.PauseInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.pausedSet), nil
}

func (b *memDriver) RegisterTasks(_ context.Context, ts []driver.TaskInfo) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range ts {
		b.tasks[t.Name] = t
	}
	return nil
}

func (b *memDriver) Registry(context.Context) ([]driver.TaskInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Values(b.tasks)), nil
}

func (b *memDriver) ForgetTask(_ context.Context, task string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.tasks[task]
	delete(b.tasks, task)
	return ok, nil
}

func (b *memDriver) Shards(_ context.Context, want map[string]int) (map[string]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int, len(want))
	for task, n := range want {
		if _, ok := b.shards[task]; !ok && n > 0 {
			b.shards[task] = n
		}
		if n, ok := b.shards[task]; ok {
			out[task] = n
		}
	}
	return out, nil
}

func (b *memDriver) Ping(context.Context) error { return nil }

// Announce and Known: the in-process store has one replica, whose tasks are
// the ones it announced last.
func (b *memDriver) Announce(_ context.Context, a driver.Announcement, ttl time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ttl < 0 { // a withdrawal
		b.announced = driver.Replica{}
		return nil
	}
	now := b.now()
	if b.announced.Since.IsZero() {
		b.announced.Since = now
	}
	b.announced.ID, b.announced.Host, b.announced.Version, b.announced.Seen = b.cfg.Replica, a.Host, a.Version, now
	b.announced.Process = a.Process
	b.announced.Tasks = append([]string(nil), a.Tasks...)
	return nil
}

func (b *memDriver) Replicas(context.Context) ([]driver.Replica, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.announced.Seen.IsZero() {
		return nil, nil
	}
	r := b.announced
	r.Tasks = append([]string(nil), r.Tasks...)
	return []driver.Replica{r}, nil
}

func (b *memDriver) Known(_ context.Context, task string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.announced.Tasks, task), nil
}
