package scheduler

import (
	"context"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/registry"
)

// publishHealth reads the history of every task in the config and in the
// task registry and publishes its flags: any replica tells when a task it
// has in its config stopped firing, even when no replica runs it, and
// every replica tells it of a task no config lists any more, until an
// operator forgets it (tickd forget).
// healthBatch is how many tasks' histories the health checks read in one
// round trip.
const healthBatch = 500

func (s *Scheduler) publishHealth(ctx context.Context) {
	cfg := s.Config()
	pauses, err := s.store.Fleet().Pauses(ctx)
	if err != nil {
		return // the pause loop says so
	}
	replicas, err := s.store.Fleet().Replicas(ctx)
	if err != nil {
		s.storeFailed("history", "health", "cannot read the replicas for the tasks' health", Event{}, err)
		return
	}
	reg, err := s.store.Fleet().Registry(ctx)
	if err != nil {
		s.storeFailed("history", "health", "cannot read the task registry for the tasks' health", Event{}, err)
		return
	}
	all := make([]*config.Task, 0, len(cfg.Tasks))
	for i := range cfg.Tasks {
		all = append(all, &cfg.Tasks[i])
	}
	orphans := registry.Orphans(cfg, reg)
	published := map[string]bool{}
	for i := range orphans {
		all = append(all, &orphans[i].Task)
		published[orphans[i].Name] = true
	}
	// A few round trips however many tasks: healthBatch tasks' histories
	// in each.
	for from := 0; from < len(all); from += healthBatch {
		batch := all[from:min(from+healthBatch, len(all))]
		ps, err := history.ReadPasts(ctx, s.store, batch, 0, history.RecentActions, pauses, replicas)
		if err != nil {
			s.storeFailed("history", "health", "cannot read the history for the tasks' health", Event{}, err)
			return
		}
		now := s.clock.Now()
		for i, t := range batch {
			views, h := history.Assess(t, now, ps[i])
			s.metrics.Health(t.Name, views, h)
		}
	}
	for name := range s.orphansPublished { // forgotten since, or back in the config
		if _, inConfig := cfg.Task(name); !published[name] && !inConfig {
			s.metrics.Forget(name)
		}
	}
	s.orphansPublished = published
}
