package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/earlysignal"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
	"github.com/tickd/tickd/internal/proc"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/scheduler"
	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/redisdriver"
)

// lockTask is the task name under which `tickd lock` keys live.
const lockTask = report.LockTask

func runLock(ctx context.Context, args []string, stderr io.Writer) error {
	c := newCmdline("lock", "KEY -- CMD [ARGS…]")
	ttl := c.fs.Duration("ttl", time.Minute, "lease TTL; renewed every ttl/3 while CMD runs")
	busyExit := c.fs.Int("busy-exit", 0, "exit status when another holder has the key")
	pos, argv, err := c.parse(args)
	switch {
	case err != nil:
		return err
	case len(pos) == 0:
		return c.usage("missing KEY")
	case len(pos) > 1:
		return c.usage("unexpected argument %q before -- (give CMD after --)", pos[1])
	case len(argv) == 0:
		return c.usage("missing -- CMD: the command to run under the lease")
	case *ttl < driver.MinTTL:
		return c.usage("-ttl %v is too short to renew; use at least %v", *ttl, driver.MinTTL)
	}
	key := pos[0]
	store, done, err := lockStore(*c.config, *ttl)
	if err != nil {
		return err
	}
	defer done()
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("key", key)
	l, err := acquireLock(ctx, store, key, *ttl, log)
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		log.Info("held by another holder: not running the command", "holder", busy.Holder, "since", busy.Since.UTC().Format(time.RFC3339), "fence", busy.Fence)
		return exitError{*busyExit}
	}
	if err != nil {
		return err
	}

	runCtx, cancel := context.WithCancelCause(l.Context())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	earlysignal.Hand(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := <-sigs; ok {
			cancel(fmt.Errorf("tickd lock received %v", s))
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TICKD_LOCK_KEY="+key, fmt.Sprintf("TICKD_FENCE=%d", l.Fence))
	// As in the daemon: killed with tickd lock, so a kill -9 never leaves CMD
	// going on without a renewed lease.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	code, runErr := proc.Start(runCtx, cmd, scheduler.Grace(*ttl), l.Check, nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ReleaseTimeout)
	defer rcancel()
	outcome := driver.OutcomeDone
	if runErr != nil || code != 0 {
		outcome = driver.OutcomeFailed
	}
	if _, err := l.Release(rctx, driver.Finished{Outcome: outcome, Started: l.Acquired, Ended: time.Now()}, nil); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		log.Warn("release failed; the lease expires by itself", logs.KeyError, err)
	}
	if runErr != nil {
		return commandError(argv[0], runErr, stderr, log)
	}
	return exitError{code}
}

// lockStore opens the store tickd lock takes its lease in, from the config
// file's connection. On a Redis new to tickd (or that lost its data),
// nothing is granted until the leases it may have forgotten have expired:
// ttl's, and those of the config's tasks that share the locks' bucket (one
// quarantine for the bucket), not every task's.
func lockStore(path string, ttl time.Duration) (*lease.Store, func(), error) {
	cfg, err := config.LoadConnection(path)
	if err != nil {
		return nil, nil, err
	}
	same := *cfg
	same.Tasks = nil
	for _, t := range cfg.Tasks {
		if redisdriver.SameBucket(t.Name, lockTask) {
			same.Tasks = append(same.Tasks, t)
		}
	}
	return cliStore(&same, "lock", ttl)
}

// acquireLock takes key's lease, waiting out a quarantine (said once).
func acquireLock(ctx context.Context, store *lease.Store, key string, ttl time.Duration, log *slog.Logger) (*lease.Lease, error) {
	for said := false; ; said = true {
		l, err := store.Acquire(ctx, driver.Request{Task: lockTask, Entity: key, TTL: ttl, Reason: driver.ReasonTrigger})
		var qe *lease.QuarantineError
		if !errors.As(err, &qe) {
			return l, err
		}
		if !said { // once: the wait is known from the start
			log.Warn("waiting: Redis lost its data or is new to tickd; no lease is granted until every lease it may have forgotten has expired (the config's longest lease_ttl, or -ttl)",
				"wait", qe.Left.Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(qe.Left, time.Second)):
		}
	}
}

// commandError is tickd lock's exit for a command that could not run or
// was stopped: 127 when not found, 126 when not runnable, as a shell says.
func commandError(name string, runErr error, stderr io.Writer, log *slog.Logger) error {
	var ee *exec.Error
	var pe *os.PathError
	switch {
	case errors.As(runErr, &ee) && errors.Is(ee.Err, exec.ErrNotFound), errors.Is(runErr, os.ErrNotExist):
		fmt.Fprintf(stderr, "tickd lock: %s: command not found\n", name)
		return exitError{127}
	case errors.As(runErr, &ee), errors.As(runErr, &pe):
		fmt.Fprintf(stderr, "tickd lock: %s: cannot run it: %v\n", name, runErr)
		return exitError{126}
	}
	log.Error("command stopped", logs.KeyError, runErr)
	return exitError{1}
}
