package report

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// MaxReason bounds a pause's or resume's reason (a 9 MB one was once shown
// on every page and logged whole).
const MaxReason = 1000

// Paused is what a pause or a resume did, for tickd pause|resume and the
// console: Changed is false when the task was already in the state asked
// for and nothing was given to change (nothing is recorded then).
type Paused struct {
	Changed bool
	Paused  bool
	Pause   lease.PauseInfo // the pause in force after it, when Paused
	Said    string
}

// SetPause pauses t (paused) with who, why and for how long (0: until
// resumed), or resumes it, and records the action when something changed.
// A pause of a paused task keeps who paused it and when, and changes the
// reason or the end given; without either, nothing changes.
func SetPause(ctx context.Context, store *lease.Store, t *scheduler.Task, paused bool, by, reason string, forD time.Duration, now time.Time) (Paused, error) {
	if len(reason) > MaxReason {
		return Paused{}, fmt.Errorf("the reason is %d bytes: at most %d", len(reason), MaxReason)
	}
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return Paused{}, err
	}
	cur, was := pauses[t.Name]
	res := Paused{Paused: paused}
	a := lease.Action{Task: t.Name, At: now, By: by, Reason: reason}
	switch {
	case !paused && !was:
		res.Said = t.Name + " is not paused: nothing changed"
		return res, nil
	case !paused:
		if err := store.SetPaused(ctx, t.Name, false); err != nil {
			return res, err
		}
		a.What, res.Changed = "resume", true
		res.Said = fmt.Sprintf("resumed %s (paused %s)", t.Name, pauseWords(cur, t))
	case was && reason == "" && forD == 0:
		res.Pause = cur
		res.Said = fmt.Sprintf("%s is already paused (%s): nothing changed; give -reason or -for to change the pause", t.Name, pauseWords(cur, t))
		return res, nil
	default:
		p := lease.PauseInfo{By: by, At: now, Reason: reason}
		if was {
			p = cur
			if reason != "" {
				p.Reason = reason
			}
		}
		if forD > 0 {
			p.Until = now.Add(forD)
		}
		if err := store.Pause(ctx, t.Name, p); err != nil {
			return res, err
		}
		a.What, a.Until, res.Pause, res.Changed = "pause", p.Until, p, true
		if was {
			a.Detail = "changed the pause: " + pauseWords(p, t)
			res.Said = fmt.Sprintf("%s was already paused; its pause is now: %s", t.Name, pauseWords(p, t))
		} else {
			res.Said = fmt.Sprintf("paused %s%s: every replica stops ticking it within a second; running runs finish", t.Name, untilWords(p, t))
		}
	}
	if err := RecordAction(ctx, store, t, a); err != nil {
		res.Said += " (done, but not recorded in the history: " + err.Error() + ")"
	}
	return res, nil
}

// pauseWords says who paused, when, why and until when, in t's zone.
func pauseWords(p lease.PauseInfo, t *scheduler.Task) string {
	var b strings.Builder
	b.WriteString("by " + p.By)
	if !p.At.IsZero() {
		b.WriteString(" since " + p.At.In(t.Location).Format(time.RFC3339))
	}
	if p.Reason != "" {
		b.WriteString(": " + p.Reason)
	}
	b.WriteString(untilWords(p, t))
	return b.String()
}

func untilWords(p lease.PauseInfo, t *scheduler.Task) string {
	if p.Until.IsZero() {
		return ""
	}
	return " until " + p.Until.In(t.Location).Format(time.RFC3339)
}
