package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/report"
)

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
	cfg, err := config.Load(*c.config)
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "forget", 0)
	if err != nil {
		return err
	}
	defer done()
	task := pos[0]
	d, err := ops.Forget(ctx, store, task, *by, *reason)
	if err != nil {
		return err
	}
	notRecorded(d)
	if *asJSON {
		return printJSON(stdout, report.ForgetDoc{Task: task, By: *by, Reason: *reason})
	}
	fmt.Fprintln(stdout, d.Said)
	return nil
}
