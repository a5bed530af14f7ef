package tasks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exec runs a command: argv with {entity} replaced, never through a shell, in
// its own process group. Exit 0 is Done, RescheduleCode is Reschedule, any
// other status fails. Its stdout and stderr lines are logged with the run's
// attributes.
type Exec struct {
	Argv           []string
	RescheduleCode int // 0: none
	// Grace is how long a stopped run has between SIGTERM to its process
	// group and SIGKILL. The scheduler sets it below the lease's safety
	// margin, so the process is gone before the lease could expire.
	Grace time.Duration
}

// ErrExit is wrapped by the error of a command that exited non-zero.
var ErrExit = errors.New("tasks: command failed")

// Expand replaces {entity} in each argument; an entity is always one
// argument's worth of literal text, whatever it holds.
func Expand(argv []string, entity string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "{entity}", entity)
	}
	return out
}

// Env is the environment a run's command gets on top of the daemon's.
func Env(run Run) []string {
	tick := ""
	if !run.Tick.IsZero() {
		tick = run.Tick.UTC().Format(time.RFC3339)
	}
	return []string{
		"TICKD_TASK=" + run.Task,
		"TICKD_ENTITY=" + run.Entity,
		"TICKD_TICK=" + tick,
		"TICKD_FENCE=" + strconv.FormatInt(run.Fence, 10),
		"TICKD_REASON=" + string(run.Reason),
		"TICKD_ATTEMPT=" + strconv.Itoa(run.Attempt),
	}
}

// Do runs the command and waits for it.
func (e Exec) Do(ctx context.Context, run Run) (Result, error) {
	argv := Expand(e.Argv, run.Entity)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), Env(run)...)
	// Own process group, so a stop reaches the command's children too; and
	// killed with the daemon, so a kill -9 of tickd never leaves a run going
	// on without a lease (Linux: the kernel sends SIGKILL when tickd dies).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	log := run.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	code, err := Start(ctx, cmd, e.Grace, run.Check, log)
	if err != nil {
		return Done, err
	}
	switch {
	case code == 0:
		return Done, nil
	case e.RescheduleCode != 0 && code == e.RescheduleCode:
		return Reschedule, nil
	}
	return Done, fmt.Errorf("%w: exit status %d", ErrExit, code)
}

// Start starts cmd (which must have Setpgid), logs its output lines, and
// waits. When ctx is cancelled the process group gets SIGTERM, then SIGKILL
// after grace. It returns the exit status, or an error if the command could
// not start or was stopped (wrapping context.Cause(ctx)).
//
// check, when not nil, is called right before the process starts; on an
// error nothing starts and Start returns it, wrapping ErrNotStarted.
// With a nil log, the command's output goes wherever cmd says.
func Start(ctx context.Context, cmd *exec.Cmd, grace time.Duration, check func() error, log *slog.Logger) (int, error) {
	if err := checkStart(check); err != nil {
		return -1, err
	}
	var readers []io.Reader
	if log != nil {
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return -1, err
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return -1, err
		}
		readers = []io.Reader{stdout, stderr}
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pgid := cmd.Process.Pid
	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Add(1)
		go func() { defer wg.Done(); logLines(r, log, []string{"stdout", "stderr"}[i]) }()
	}

	exited := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		close(stopped)
		syscall.Kill(-pgid, syscall.SIGTERM) //nolint:errcheck
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
		}
	}()
	wg.Wait() // all output read: the pipes are closed
	err := cmd.Wait()
	close(exited)
	select {
	case <-stopped:
		// Children left in the group must not outlive the run either.
		syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
		return -1, fmt.Errorf("stopped: %w", context.Cause(ctx))
	default:
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return -1, fmt.Errorf("%w: killed by %v", ErrExit, ws.Signal())
			}
			return ee.ExitCode(), nil
		}
		return -1, err
	}
	return 0, nil
}

// maxLine bounds one logged line; longer lines are split.
const maxLine = 16 * 1024

func logLines(r io.Reader, log *slog.Logger, stream string) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			log.Info(strings.TrimRight(string(line), "\r\n"), "stream", stream)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
