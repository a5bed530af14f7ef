package lease

import (
	"context"

	"github.com/tickd/tickd/lease/driver"
)

// Pause pauses task's ticks on every replica, with who, why and until when.
// A pause with an Until ends by itself then.
func (f Fleet) Pause(ctx context.Context, task string, p driver.PauseInfo) error {
	return f.s.b.SetPaused(ctx, task, &p)
}

// Resume resumes task's ticks on every replica.
func (f Fleet) Resume(ctx context.Context, task string) error {
	return f.s.b.SetPaused(ctx, task, nil)
}

// Pauses returns the paused tasks and their pauses; a pause whose Until
// passed is left out.
func (f Fleet) Pauses(ctx context.Context) (map[string]driver.PauseInfo, error) {
	s := f.s
	m, err := s.b.Paused(ctx)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	for task, p := range m {
		if !p.Until.IsZero() && !now.Before(p.Until) {
			// Over: removed, so that a data loss of the infos' shard
			// cannot bring it back as a pause with no end.
			s.b.EndPause(ctx, task, p) //nolint:errcheck // the next read tries again
			delete(m, task)
		}
	}
	return m, nil
}
