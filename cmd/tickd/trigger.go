package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/ops"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/retry"
	"github.com/tickd/tickd/lease/driver"
)

// exitSkipped is trigger -wait's exit status when an entity was busy and
// on_busy is skip.
const exitSkipped = 3

func runTrigger(ctx context.Context, args []string, stdout io.Writer) error {
	c := newCmdline("trigger", "TASK [ENTITY…]")
	fs := c.fs
	wait := fs.Bool("wait", false, "wait for the runs and exit non-zero if one failed (3 if one was skipped as busy)")
	timeout := fs.Duration("timeout", 10*time.Minute, "with -wait, how long to wait")
	force := fs.Bool("force", false, "trigger entities the task's static list or file does not have")
	asJSON := c.jsonFlag()
	by := c.byFlag()
	pos, err := c.args(args, 1, -1, "TASK")
	if err != nil {
		return err
	}
	cfg, t, err := loadTask(*c.config, pos[0])
	if err != nil {
		return err
	}
	ids, err := ops.TriggerIDs(ctx, *t, pos[1:], *force)
	var nl *ops.NotListed
	if errors.As(err, &nl) {
		return fmt.Errorf("%w: give -force to trigger it anyway", err)
	}
	if err != nil {
		return err
	}
	store, done, err := cliStore(cfg, "trigger", 0)
	if err != nil {
		return err
	}
	defer done()
	doc, err := trigger(ctx, store, t, ids, *wait, *timeout, *by)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(stdout, doc); err != nil {
			return err
		}
	} else {
		printTrigger(stdout, doc)
	}
	return triggerStatus(doc, *timeout, *asJSON)
}

// trigger enqueues a run of each id and, with wait, waits up to timeout
// for their answers: the document that says what happened.
func trigger(ctx context.Context, store *lease.Store, t *config.Task, ids []string, wait bool, timeout time.Duration, by string) (report.TriggerDoc, error) {
	task := t.Name
	// With -wait, every run the trigger causes answers this request id with
	// its outcome, whatever that run's reason (a follow-up, a pending
	// reschedule the trigger joined, a hand-over).
	var reqs []string
	if wait {
		reqs = []string{lease.NewRequestID()}
	}
	d, err := ops.Trigger(ctx, store, t, ids, reqs, by)
	if err != nil {
		return report.TriggerDoc{}, err
	}
	notRecorded(d.Done)
	pauses, err := store.Fleet().Pauses(ctx)
	if err != nil {
		return report.TriggerDoc{}, fmt.Errorf("read paused tasks: %w", err)
	}
	_, paused := pauses[task]
	doc := report.TriggerDoc{Task: task, Triggered: len(ids), Paused: paused, Runs: []report.TriggerRunDoc{}, Busy: []report.TriggerBusyDoc{}}
	for _, b := range d.Busy {
		doc.Busy = append(doc.Busy, report.TriggerBusyDoc{Entity: b.Entity, Holder: b.Holder, Since: report.Instant(b.Since), Said: b.Said()})
	}
	if !wait {
		return doc, nil
	}
	answers, err := waitAnswers(ctx, store, task, reqs[0], ids, timeout)
	if err != nil {
		return report.TriggerDoc{}, err
	}
	for _, id := range ids {
		r := report.TriggerRunDoc{Entity: id, Outcome: answerPending}
		if a, ok := answers[id]; ok {
			r.Outcome = string(a)
		} else {
			r.State, r.Since, r.Where = whereIs(ctx, store, task, id, doc.Paused)
		}
		doc.Runs = append(doc.Runs, r)
	}
	return doc, nil
}

// printTrigger writes the document for people.
func printTrigger(w io.Writer, doc report.TriggerDoc) {
	fmt.Fprintf(w, "triggered %d run(s) of %s\n", doc.Triggered, doc.Task)
	if doc.Paused {
		fmt.Fprintf(w, "note: %s is paused: the runs wait until it is resumed (tickd resume)\n", doc.Task)
	}
	for _, b := range doc.Busy {
		fmt.Fprintf(w, "%s %q: %s\n", doc.Task, b.Entity, b.Said)
	}
	for _, r := range doc.Runs {
		text := answerText(r.Outcome)
		if r.Where != "" {
			text = r.Where
		}
		fmt.Fprintf(w, "%s %q: %s\n", doc.Task, r.Entity, text)
	}
}

// triggerStatus is the command's error, from which its exit status comes:
// nil when every run succeeded (or nothing was waited for), exitSkipped
// when one was skipped as busy, else an error saying how many did not
// succeed or were not answered (1).
func triggerStatus(doc report.TriggerDoc, timeout time.Duration, asJSON bool) error {
	var failed, skipped, pending int
	for _, r := range doc.Runs {
		switch driver.Outcome(r.Outcome) {
		case answerPending:
			pending++
		case driver.OutcomeDone, driver.OutcomeReschedule:
		case driver.AnswerSkipped:
			skipped++
		default:
			failed++
		}
	}
	n := len(doc.Runs)
	var err error
	switch {
	case failed > 0 && pending > 0:
		err = fmt.Errorf("%d of %d runs did not succeed, %d not answered within -timeout %v", failed, n, pending, timeout)
	case failed > 0:
		err = fmt.Errorf("%d of %d runs did not succeed", failed, n)
	case pending > 0:
		err = fmt.Errorf("%d of %d runs not answered within -timeout %v", pending, n, timeout)
	case skipped > 0:
		return exitError{exitSkipped}
	default:
		return nil
	}
	if asJSON {
		return printedError{err}
	}
	return err
}

// answerPending is -wait's answer for an entity whose run had not ended
// when -timeout passed.
const answerPending = "pending"

// answerText is how an answer reads for people.
func answerText(a string) string {
	switch driver.Outcome(a) {
	case driver.AnswerSkipped:
		return "skipped (busy)"
	case driver.AnswerDropped:
		return "dropped (no replica runs the task)"
	case answerPending:
		return "pending (no answer within -timeout)"
	}
	return a
}

// waitAnswers waits until request id has an answer for every entity of ids,
// or until timeout, and returns the answers it has: one read of every answer
// at once per poll, polls from 50ms apart to 1s. The answers are deleted
// once read in full.
func waitAnswers(ctx context.Context, store *lease.Store, task, id string, ids []string, timeout time.Duration) (map[string]driver.Outcome, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var got map[string]driver.Outcome
	poll := retry.Backoff{First: 50 * time.Millisecond, Max: time.Second}
	for {
		answers, err := store.Answers(ctx, task, id)
		if err != nil {
			return nil, err
		}
		if got = answers; len(got) >= len(ids) {
			store.Forget(ctx, task, id) //nolint:errcheck // they expire anyway
			return got, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return got, nil
		case <-time.After(poll.Next()):
		}
	}
}

// whereIs says where the run of an entity whose trigger was not answered
// in time is: running (since when, where), queued (due since when), or
// neither.
func whereIs(ctx context.Context, store *lease.Store, task, id string, paused bool) (string, report.Instant, string) {
	st, err := store.Fleet().Entity(ctx, task, id)
	now := time.Now()
	switch {
	case err != nil:
		return "unknown", report.Instant{}, answerText(answerPending) + "; its state cannot be read: " + err.Error()
	case st.Held != nil:
		return "running", report.Instant(st.Held.Since), fmt.Sprintf("%s: running on %s for %v (reason %s)",
			answerText(answerPending), st.Held.Holder, now.Sub(st.Held.Since).Round(time.Second), st.Held.Reason)
	case st.Pending != nil && paused:
		return "queued", report.Instant(st.Pending.At), fmt.Sprintf("%s: queued as %s, due for %v; the task is paused: it runs once the task is resumed",
			answerText(answerPending), st.Pending.Reason, max(0, now.Sub(st.Pending.At)).Round(time.Second))
	case st.Pending != nil:
		return "queued", report.Instant(st.Pending.At), fmt.Sprintf("%s: queued as %s, due for %v and waiting for a free run slot on a replica",
			answerText(answerPending), st.Pending.Reason, max(0, now.Sub(st.Pending.At)).Round(time.Second))
	}
	return "unknown", report.Instant{}, answerText(answerPending) + ": neither running nor queued now (its run may have ended just after -timeout)"
}
