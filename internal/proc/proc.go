// Package proc runs a run's command: its own process group, its output
// logged line by line under a cap and its end kept, SIGTERM then SIGKILL
// after a grace when the run is stopped. tasks.Exec and tickd lock run
// their commands through it.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/tickd/tickd/internal/logs"
)

// ErrExit is wrapped by the error of a command that exited non-zero, or
// was killed by a signal.
var ErrExit = errors.New("tasks: command failed")

// ErrNotStarted is wrapped by the error of a run whose check failed: the
// action did not begin, so the run can be handed over whole.
var ErrNotStarted = errors.New("tasks: run not started")

// CheckStart calls check if it is set; its error wraps ErrNotStarted.
func CheckStart(check func() error) error {
	if check == nil {
		return nil
	}
	if err := check(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	return nil
}

// Tail keeps the last Max bytes written to it.
type Tail struct {
	Max int
	mu  sync.Mutex
	buf []byte
}

// Write keeps the end of p and what came before, up to Max bytes.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.Max {
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Len is how many bytes it holds.
func (t *Tail) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buf)
}

// String is what it holds, from a rune's start.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(b)
}

// Start starts cmd (which must have Setpgid), logs its output lines, and
// waits. When ctx is cancelled the process group gets SIGTERM, then SIGKILL
// after grace, which is logged (logs.MsgKilled, with log's attributes: the
// run's). It returns the exit status, or an error if the command could not
// start or was stopped (wrapping context.Cause(ctx)).
//
// check, when not nil, is called right before the process starts; on an
// error nothing starts and Start returns it, wrapping ErrNotStarted.
// With a nil log, the command's output goes wherever cmd says.
func Start(ctx context.Context, cmd *exec.Cmd, grace time.Duration, check func() error, log *slog.Logger) (int, error) {
	return StartTail(ctx, cmd, grace, check, log, nil)
}

// StartTail is Start that also keeps the end of the command's output (its
// lines, stdout and stderr as they come) in tail, when tail and log are not
// nil. Both streams go to one pipe, so that their lines are logged and kept
// in the order the command wrote them (two pipes read apart lose it: a
// script's "processing…" on stdout came after the "ERROR" it wrote to
// stderr next).
func StartTail(ctx context.Context, cmd *exec.Cmd, grace time.Duration, check func() error, log *slog.Logger, tail *Tail) (int, error) {
	if err := CheckStart(check); err != nil {
		return -1, err
	}
	var out, in *os.File
	if log != nil {
		var err error
		if out, in, err = os.Pipe(); err != nil {
			return -1, err
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = in, in
	}
	// Running before the command starts, so that registering its group
	// is a write to a pipe, not a process to start first (guard.go).
	guardian.ready()
	err := cmd.Start()
	if in != nil {
		in.Close() // the command has its own copy: the pipe ends when its copies close
	}
	if err != nil {
		return -1, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	pgid := cmd.Process.Pid
	// The group dies with this process, however it dies (guard.go).
	guardian.add(pgid)
	defer guardian.remove(pgid)
	if err := GuardianErr(); err != nil && log != nil {
		log.Warn("a run's children may outlive a kill -9 of tickd: its guardian could not start (the command itself dies with tickd)", "error", err.Error())
	}
	var wg sync.WaitGroup
	if out != nil {
		wg.Add(1)
		go func() { defer wg.Done(); logLines(out, log, tail) }()
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
			// Said before it is done: the run ends once the kill lands,
			// and its line must be in the log by then.
			if log != nil {
				log.Warn(logs.MsgKilled, "grace", grace.String())
			}
			syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
		}
	}()
	wg.Wait() // all output read: the pipe is closed
	err = cmd.Wait()
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

// MaxLogged bounds what one run's output puts in the log, counted in log
// bytes: each line costs its own bytes and recordCost for the record
// around it (time, level, task, entity, tick, fence…), so that a run
// printing empty lines cannot make a log 200 times its output (1 MiB of
// empty lines wrote 202 MB when the cap counted output bytes). Past it,
// lines are counted, not logged, and one line at the end says how much
// was left out (the kept tail of a failed run is not affected). Blank
// lines are not logged. Two runs printing 100 MB made a 341 MB log in a
// minute before there was a cap.
var MaxLogged = 1 << 20

// recordCost is about what a log record adds around a line of output.
const recordCost = 256

func logLines(r io.Reader, log *slog.Logger, tail *Tail) {
	br := bufio.NewReaderSize(r, maxLine)
	logged, dropped, droppedLines := 0, 0, 0
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && tail != nil {
			tail.Write(line) //nolint:errcheck // never fails
		}
		text := strings.TrimRight(string(line), "\r\n")
		switch {
		case strings.TrimSpace(text) == "":
		case logged+len(line)+recordCost <= MaxLogged:
			logged += len(line) + recordCost
			log.Info(text)
		default:
			dropped += len(line)
			droppedLines++
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if dropped > 0 {
				log.Warn("output not logged past the per-run cap", "logged_bytes", logged, "dropped_bytes", dropped, "dropped_lines", droppedLines)
			}
			return
		}
	}
}
