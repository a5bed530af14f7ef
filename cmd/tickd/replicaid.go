package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
)

// errStopped: a signal asked tickd to stop before it started.
var errStopped = errors.New("stop requested during start-up")

// announceLapse bounds how long an announcement outlives its process: the
// scheduler announces every PausePoll (500ms) for 10s.
const announceLapse = 11 * time.Second

// claimReplicaID makes sure no other live process runs under replica: one
// replica id, one process. Another process's announcement under the id is
// watched: if it is renewed, that process is alive (a copied unit file, a
// replica_id given twice) and tickd refuses to start; if it lapses, it was
// a process stopped without withdrawing it (killed), and tickd starts. So a
// replica restarted after a crash under a fixed replica_id waits at most
// one announcement's life (about 10s). A Redis that does not answer is no
// reason to wait: the scheduler warns later if two processes announce the
// id (and their limits are counted per process anyway).
func claimReplicaID(ctx context.Context, store *lease.Store, replica string, sigs <-chan os.Signal, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	other, err := store.ReplicaInUse(rctx)
	cancel()
	if err != nil || other == nil {
		return nil
	}
	log.Info("another process announced this replica id: waiting to see whether it is alive (at most 11s)", scheduler.KeyReplica, replica,
		"other_host", other.Host, "other_seen", other.Seen.UTC().Format(time.RFC3339Nano))
	deadline := time.Now().Add(announceLapse)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return errStopped
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		now, err := store.ReplicaInUse(rctx)
		cancel()
		switch {
		case err != nil:
			continue
		case now == nil || now.Process != other.Process:
			log.Info("the other process's announcement lapsed: it was not running", scheduler.KeyReplica, replica)
			return nil
		case now.Seen.After(other.Seen):
			return fmt.Errorf("replica id %q is in use by a live tickd on host %s (running since %s): give each replica its own replica_id (or leave it out: hostname-pid)",
				replica, now.Host, now.Since.UTC().Format(time.RFC3339))
		}
	}
	return nil
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
