package lease

import (
	"context"
	"encoding/json"
	"time"
)

// PauseInfo is who paused a task, when, why and until when.
type PauseInfo struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"` // zero: until resumed
}

// Pause pauses task's ticks on every replica, with who, why and until when.
// A pause with an Until ends by itself then.
func (f Fleet) Pause(ctx context.Context, task string, p PauseInfo) error {
	s := f.s
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.b.SetPaused(ctx, task, string(data))
}

// Resume resumes task's ticks on every replica.
func (f Fleet) Resume(ctx context.Context, task string) error {
	s := f.s
	return s.b.SetPaused(ctx, task, "")
}

// Pauses returns the paused tasks and their pauses; a pause whose Until
// passed is left out.
func (f Fleet) Pauses(ctx context.Context) (map[string]PauseInfo, error) {
	s := f.s
	raw, err := s.b.Paused(ctx)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	m := make(map[string]PauseInfo, len(raw))
	for task, v := range raw {
		var p PauseInfo
		json.Unmarshal([]byte(v), &p) //nolint:errcheck // an info not understood: paused, by nobody known, with no end
		if !p.Until.IsZero() && !now.Before(p.Until) {
			// Over: removed, so that a data loss of the infos' shard
			// cannot bring it back as a pause with no end.
			s.b.EndPause(ctx, task, v) //nolint:errcheck // the next read tries again
			continue
		}
		m[task] = p
	}
	return m, nil
}
