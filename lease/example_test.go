package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/driver"
)

// A run under a lease: acquire it for (task, entity), work while its
// context is live (the store renews it; the context ends when the lease
// can no longer be trusted), then release it with the outcome. Another
// holder asking meanwhile is told who holds it. In-process here; NewRedis
// gives the same Store over Redis, shared by every replica.
func Example() {
	ctx := context.Background()
	store := lease.NewMemory(lease.Options{Replica: "replica-1"})
	defer store.Stop(context.Background()) //nolint:errcheck // an example

	req := driver.Request{Task: "sync-users", Entity: "42", TTL: 30 * time.Second, Reason: driver.ReasonTrigger}
	l, err := store.Acquire(ctx, req)
	if err != nil {
		panic(err)
	}

	var busy *lease.BusyError
	if _, err := store.Acquire(ctx, req); errors.As(err, &busy) {
		fmt.Println("busy, held by", busy.Holder)
	}

	started := time.Now()
	select {
	case <-l.Context().Done(): // the lease was lost: stop the work
	default:
		fmt.Println("working on", l.Entity, "with fence > 0:", l.Fence > 0)
	}
	if _, err := l.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone, Started: started, Ended: time.Now()}, nil); err != nil {
		panic(err)
	}
	if l2, err := store.Acquire(ctx, req); err == nil {
		fmt.Println("free again")
		l2.Release(ctx, driver.Finished{Outcome: driver.OutcomeDone}, nil) //nolint:errcheck
	}
	// Output:
	// busy, held by replica-1
	// working on 42 with fence > 0: true
	// free again
}
