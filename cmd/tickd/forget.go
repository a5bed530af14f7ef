package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// forgetDoc is `tickd forget -json`.
type forgetDoc struct {
	Task   string `json:"task"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// runForget takes a task no replica runs any more out of the task
// registry: it is gone on purpose, and no longer flagged as not firing.
// Recorded as an action of the task, with who and why.
func runForget(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("forget", "TASK")
	asJSON := c.jsonFlag()
	by := c.byFlag()
	reason := c.fs.String("reason", "", "why it is gone, for the record (tickd history)")
	pos, err := c.args(args, 1, 1, "TASK")
	if err != nil {
		return err
	}
	cfg, err := scheduler.LoadConfig(*c.config)
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "forget", 0)
	if err != nil {
		return err
	}
	defer done()
	task := pos[0]
	replicas, err := store.Replicas(ctx)
	if err != nil {
		return err
	}
	if runners := scheduler.RunnerIDs(replicas, task); len(runners) > 0 {
		return fmt.Errorf("%s is run by %s: take it out of their configs (and reload them) first", task, strings.Join(runners, ", "))
	}
	found, err := store.ForgetTask(ctx, task)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no task %q in the task registry: nothing to forget", task)
	}
	recordAction(ctx, store, nil, lease.Action{Task: task, At: time.Now(), By: *by, What: "forget", Reason: *reason})
	if *asJSON {
		return printJSON(stdout, forgetDoc{Task: task, By: *by, Reason: *reason})
	}
	fmt.Fprintf(stdout, "forgot %s: it is no longer flagged as not firing; its history stays until its retention ends\n", task)
	return nil
}
