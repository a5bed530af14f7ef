package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tickd/tickd/internal/proc"
)

// Exec runs a command: argv with {entity} replaced, never through a shell, in
// its own process group. Exit 0 is Done, RescheduleCode is Reschedule,
// BackoffExitCode is a *BackoffError (a stdout line "retry-after: N" says
// for how long), any other status fails. Its stdout and stderr lines are logged with the run's
// attributes.
type Exec struct {
	Argv           []string
	RescheduleCode int // 0: none
	// Grace is how long a stopped run has between SIGTERM to its process
	// group and SIGKILL. The scheduler sets it below the lease's safety
	// margin, so the process is gone before the lease could expire.
	Grace time.Duration
	// KeepOutput, when more than 0, keeps that many bytes of the end of a
	// failed run's output in its error (OutputError).
	KeepOutput int
}

// ErrExit is wrapped by the error of a command that exited non-zero.
var ErrExit = proc.ErrExit

// expand replaces {entity} in each argument; an entity is always one
// argument's worth of literal text, whatever it holds.
func expand(argv []string, entity string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "{entity}", entity)
	}
	return out
}

// env is the environment a run's command gets on top of the daemon's: the
// run's fields, and each attribute as TICKD_ATTR_NAME (its name
// upper-cased), in the order of the names.
func env(run Run) []string {
	tick := ""
	if !run.Tick.IsZero() {
		tick = run.Tick.UTC().Format(time.RFC3339)
	}
	vs := make([]string, 0, 6+len(run.Attributes))
	vs = append(vs,
		"TICKD_TASK="+run.Task,
		"TICKD_ENTITY="+run.Entity,
		"TICKD_TICK="+tick,
		"TICKD_FENCE="+strconv.FormatInt(run.Fence, 10),
		"TICKD_REASON="+string(run.Reason),
		"TICKD_ATTEMPT="+strconv.Itoa(run.Attempt),
	)
	for _, name := range slices.Sorted(maps.Keys(run.Attributes)) {
		vs = append(vs, "TICKD_ATTR_"+strings.ToUpper(name)+"="+run.Attributes[name])
	}
	return vs
}

// Do runs the command and waits for it.
func (e Exec) Do(ctx context.Context, run Run) (Result, error) {
	argv := expand(e.Argv, run.Entity)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env(run)...), traceEnv(ctx)...)
	// Own process group, so a stop reaches the command's children too; and
	// killed with the daemon, so a kill -9 of tickd never leaves a run going
	// on without a lease (Linux: the kernel sends SIGKILL when tickd dies).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	log := run.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tail := &proc.Tail{Max: max(e.KeepOutput, 1024)} // its end: a retry-after line
	code, err := proc.StartTail(ctx, cmd, e.Grace, run.Check, log, tail)
	if q, ok := quotaLines(tail.String(), code == BackoffExitCode, time.Now()); (ok || code == 0) && err == nil && run.Quota != nil {
		run.Quota(q) // a run that succeeded is an answer without a 429
	}
	if err == nil {
		switch {
		case code == 0:
			return Done, nil
		case e.RescheduleCode != 0 && code == e.RescheduleCode:
			return Reschedule, nil
		case code == BackoffExitCode:
			after, said := retryAfterLine(tail.String(), time.Now())
			return Done, &BackoffError{After: after, Reason: printable(strings.TrimSpace(fmt.Sprintf("exit status %d %s", code, said)), maxReason)}
		}
		err = fmt.Errorf("%w: exit status %d", ErrExit, code)
	}
	if e.KeepOutput > 0 && tail.Len() > 0 {
		err = &OutputError{Err: err, Output: lastBytes(tail.String(), e.KeepOutput)}
	}
	return Done, err
}

// OutputError is a failed run's error with the end of its output (exec) or
// the start of the response body (HTTP).
type OutputError struct {
	Err    error
	Output string
}

func (e *OutputError) Error() string { return e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// OutputOf returns the output an error carries (OutputError), or "".
func OutputOf(err error) string {
	var oe *OutputError
	if errors.As(err, &oe) {
		return oe.Output
	}
	return ""
}
