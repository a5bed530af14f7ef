package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/lease"
)

// errStopped: a signal asked tickd to stop before it started.
var errStopped = errors.New("stop requested during start-up")

// claimReplicaID claims replica (app.ClaimReplicaID), given up with
// errStopped when a stopping signal arrives meanwhile (a SIGHUP is moot:
// the config was just read).
func claimReplicaID(ctx context.Context, store *lease.Store, replica string, sigs <-chan os.Signal, log *slog.Logger) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	claimed, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGHUP {
					cancel(errStopped)
					return
				}
			case <-claimed:
				return
			}
		}
	}()
	err := app.ClaimReplicaID(cctx, store, replica, log)
	close(claimed)
	<-watched
	if errors.Is(context.Cause(cctx), errStopped) { // a signal the watch took is not lost
		return errStopped
	}
	return err
}

// claimReplica claims the replica id (claimReplicaID) of a daemon on a
// Redis, and has the services withdraw its announcement when they stop;
// errStopped when a signal asked tickd to stop during start-up.
func claimReplica(ctx context.Context, ss *services, cfg *config.Config, store *lease.Store, replica string, sigs <-chan os.Signal, log *slog.Logger) error {
	if sig, ok := stopRequested(sigs); ok {
		log.Info("signal received during start-up", "signal", sig.String())
		return errStopped
	}
	if cfg.Redis == nil {
		return nil // one process, in-process leases
	}
	if err := claimReplicaID(ctx, store, replica, sigs, log); err != nil {
		return err
	}
	return ss.start(ctx, "announcement", withdrawal(store), shortStop)
}

// withdrawal is a service whose stop withdraws this process's
// announcement (lease.Store.Withdraw), after the scheduler's stop: a
// process that starts under the same replica id next does not wait.
func withdrawal(store *lease.Store) service {
	return funcs{
		start: func(context.Context) error { return nil },
		stop:  store.Withdraw,
	}
}
