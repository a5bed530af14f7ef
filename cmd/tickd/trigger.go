package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
	"github.com/tickd/tickd/tasks"
)

// errTriggerSkipped: a triggered entity was busy and on_busy is skip.
var errTriggerSkipped = errors.New("skipped")

func runTrigger(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("trigger", "TASK [ENTITY…]")
	fs := c.fs
	wait := fs.Bool("wait", false, "wait for the runs and exit non-zero if one failed (3 if one was skipped as busy)")
	timeout := fs.Duration("timeout", 10*time.Minute, "with -wait, how long to wait")
	asJSON := c.jsonFlag()
	pos, err := c.args(args, 1, -1, "TASK")
	if err != nil {
		return err
	}
	cfg, t, err := loadTask(*c.config, pos[0])
	if err != nil {
		return err
	}
	ids := pos[1:]
	if len(ids) == 0 {
		if ids, err = allEntities(ctx, *t); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if err := tasks.CheckID(id); err != nil || id == "" {
			return fmt.Errorf("entity %q: %v", id, err)
		}
	}
	store, done, err := cliStore(cfg, "trigger", 0)
	if err != nil {
		return err
	}
	defer done()
	base := map[string]int64{}
	for _, id := range ids {
		if *wait {
			st, err := store.Entity(ctx, t.Name, id)
			if err != nil {
				return err
			}
			if st.Last != nil {
				base[id] = st.Last.Fence
			}
		}
		if err := store.Enqueue(ctx, lease.Due{Task: t.Name, Entity: id, Reason: lease.ReasonTrigger}, 0); err != nil {
			return err
		}
	}
	paused, err := store.Paused(ctx)
	if err != nil {
		return fmt.Errorf("read paused tasks: %w", err)
	}
	result := triggerDoc{Task: t.Name, Triggered: len(ids), Paused: paused[t.Name], Runs: []triggerRunDoc{}}
	if !*asJSON {
		fmt.Fprintf(stdout, "triggered %d run(s) of %s\n", len(ids), t.Name)
		if result.Paused {
			fmt.Fprintf(stdout, "note: %s is paused: the runs wait until it is resumed (tickd resume)\n", t.Name)
		}
	}
	var failed, skipped int
	if *wait {
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		for _, id := range ids {
			outcome, err := waitRun(wctx, store, *t, id, base[id])
			if err != nil {
				return fmt.Errorf("waiting for %s %q: %w", t.Name, id, err)
			}
			result.Runs = append(result.Runs, triggerRunDoc{id, outcome})
			if !*asJSON {
				fmt.Fprintf(stdout, "%s %q: %s\n", t.Name, id, outcome)
			}
			switch outcome {
			case string(lease.OutcomeDone), string(lease.OutcomeReschedule):
			case "skipped (busy)":
				skipped++
			default:
				failed++
			}
		}
	}
	if *asJSON {
		if err := printJSON(stdout, result); err != nil {
			return err
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d of %d runs did not succeed", failed, len(ids))
	case skipped > 0:
		return errTriggerSkipped
	}
	return nil
}

// allEntities reads a task's entity source (a singleton's one entity is its
// name).
func allEntities(ctx context.Context, t scheduler.Task) ([]string, error) {
	var ids []string
	err := t.Source(nil).Each(ctx, func(id string) error { ids = append(ids, id); return nil })
	return ids, err
}

// waitRun waits until a run of (task, id) newer than fence base has ended,
// and returns its outcome; or "skipped (busy)" when the trigger was taken
// while another run held the lease and on_busy is skip.
func waitRun(ctx context.Context, store *lease.Store, t scheduler.Task, id string, base int64) (string, error) {
	var goneSince time.Time
	for {
		st, err := store.Entity(ctx, t.Name, id)
		if err != nil {
			return "", err
		}
		if l := st.Last; l != nil && l.Fence > base && (l.Reason == lease.ReasonTrigger || l.Reason == lease.ReasonQueued) {
			return string(l.Outcome), nil
		}
		switch {
		case st.Pending != nil || (st.Held != nil && st.Held.Fence > base) || t.OnBusy == scheduler.OnBusyQueue:
			goneSince = time.Time{}
		case goneSince.IsZero():
			goneSince = time.Now()
		case time.Since(goneSince) > 2*time.Second:
			// Taken, not run, nothing pending: the entity was busy.
			return "skipped (busy)", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
