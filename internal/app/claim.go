package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/logs"
)

// announceLapse bounds how long an announcement outlives its process: the
// scheduler announces every PausePoll (500ms) for 10s.
const announceLapse = 11 * time.Second

// ClaimReplicaID makes sure no other live process runs under replica: one
// replica id, one process. Another process's announcement under the id is
// watched: if it is renewed, that process is alive (a copied unit file, a
// replica_id given twice) and the claim fails; if it lapses, it was a
// process stopped without withdrawing it (killed), and the claim succeeds.
// So a replica restarted after a crash under a fixed replica_id waits at
// most one announcement's life (about 10s), or until ctx is done. A Redis
// that does not answer is no reason to wait: the scheduler warns later if
// two processes announce the id (and their limits are counted per process
// anyway).
func ClaimReplicaID(ctx context.Context, store *lease.Store, replica string, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	other, err := store.Fleet().ReplicaInUse(rctx)
	cancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil || other == nil {
		return nil
	}
	log.Info("another process announced this replica id: waiting to see whether it is alive (at most 11s)", logs.KeyReplica, replica,
		"other_host", other.Host, "other_seen", other.Seen.UTC().Format(time.RFC3339Nano))
	deadline := time.Now().Add(announceLapse)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		now, err := store.Fleet().ReplicaInUse(rctx)
		cancel()
		switch {
		case err != nil:
			continue
		case now == nil || now.Process != other.Process:
			log.Info("the other process's announcement lapsed: it was not running", logs.KeyReplica, replica)
			return nil
		case now.Seen.After(other.Seen):
			return fmt.Errorf("replica id %q is in use by a live tickd on host %s (running since %s): give each replica its own replica_id (or leave it out: hostname-pid)%w",
				replica, now.Host, now.Since.UTC().Format(time.RFC3339), quiet{ErrReplicaInUse})
		}
	}
	return nil
}

// ErrReplicaInUse is wrapped by Start's error when another live process
// runs under the replica id.
var ErrReplicaInUse = errors.New("replica id in use")

// quiet wraps an error for errors.Is without adding to the message.
type quiet struct{ err error }

func (q quiet) Error() string { return "" }
func (q quiet) Unwrap() error { return q.err }
