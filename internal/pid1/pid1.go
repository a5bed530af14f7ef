// Package pid1 lets tickd be a container's first process.
//
// PID 1 has duties no other process has. Orphans are re-parented to it, and
// each stays a zombie (a process table entry) until PID 1 waits for it; an
// exec task whose command starts a background process and exits leaves one
// at every run, and a container that never reaps them runs out of
// processes. And the kernel sends PID 1 no signal it has not asked for.
//
// So when tickd finds itself PID 1, it runs as a minimal init, as tini or
// `docker run --init` would: it starts itself again as its one child,
// forwards the signals it gets to that child, reaps every process that
// ends, and exits as the child did (its exit code, or 128 + the signal that
// killed it). The child is tickd proper, and knows it runs under this init
// (Child), so that two containers of one host name (with --network=host)
// are told apart in replica ids although both of their tickds have the
// same PID.
package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/tickd/tickd/internal/earlysignal"
)

// childEnv marks the child the init started; the child removes it from its
// environment, so that its task commands do not inherit it.
const childEnv = "TICKD_PID1_CHILD"

// forwarded are the signals the init passes on to tickd: those a container
// engine, an operator (kill, podman kill -s) or a terminal sends.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

var child bool

func init() {
	if os.Getenv(childEnv) != "" {
		child = true
		os.Unsetenv(childEnv) //nolint:errcheck // never fails for a valid name
	}
}

// Child reports whether this process is the child of tickd's own init.
func Child() bool { return child }

// Init runs the init when this process is PID 1 and not already its child:
// it returns the exit code to exit with and true. Otherwise it returns
// false at once, and the caller goes on as tickd.
func Init() (int, bool) {
	if os.Getpid() != 1 || child {
		return 0, false
	}
	code, err := supervise()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickd (init):", err)
		return 1, true
	}
	return code, true
}

// supervise starts tickd as the child and runs the init's loop until the
// child exits.
func supervise() (int, error) {
	sigs := make(chan os.Signal, 32)
	// SIGCHLD before the child starts: its end is never missed.
	signal.Notify(sigs, syscall.SIGCHLD)
	earlysignal.Hand(sigs, forwarded...)
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			syscall.Kill(pid, sig.(syscall.Signal)) //nolint:errcheck // gone: its SIGCHLD is on its way
			continue
		}
		if code, done := reap(pid); done {
			return code, nil
		}
	}
	return 0, errors.New("signal channel closed")
}

// reap waits for every process that has ended (the child's orphans, and the
// child); it returns the child's exit code and true once the child ended.
func reap(childPid int) (int, bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return 0, false
		}
		if pid != childPid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}
