package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/scheduler"
	"github.com/tickd/tickd/tasks"
)

// A program embedding tickd's scheduler with its own Go handler and the
// in-process lease store, its config read from TOML.
func Example() {
	reg := &tasks.Registry{}
	done := make(chan string, 1)
	reg.Register("greet", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck
		done <- "hello, " + r.Entity
		return tasks.Done, nil
	})
	cfg, err := config.Parse("embedded.toml", []byte(`
[[tasks]]
name = "greeter"
every = "1h"
catch_up = "1h"
handler = "greet"
entities = ["world"]
`))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	store := lease.NewMemory(lease.Options{Replica: "example"})
	defer store.Stop(ctx) //nolint:errcheck // after the scheduler's
	s, err := scheduler.New(cfg, scheduler.Options{Store: store, Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := s.Start(ctx); err != nil { // starts the store too
		panic(err)
	}
	fmt.Println(<-done)
	stopCtx, cancel := context.WithTimeout(ctx, time.Second) // the runs' shutdown timeout
	defer cancel()
	s.Stop(stopCtx) //nolint:errcheck // nil
	// Output: hello, world
}

// A program embedding tickd with its leases in Redis, shared with the
// tickd daemons (or other embedding programs) on the same key prefix: the
// config's [redis] table is the only place Redis is described.
// Config.OpenStore opens the store it names; without [redis] it is the
// in-process store.
func Example_redis() {
	reg := &tasks.Registry{}
	reg.Register("sync-user", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck
		// ctx is cancelled if the lease can no longer be trusted.
		return tasks.Done, nil
	})
	cfg, err := config.Parse("embedded.toml", []byte(`
[redis]
url = "redis://127.0.0.1:6379/0"

[[tasks]]
name     = "sync-users"
every    = "15m"
handler  = "sync-user"
entities = ["1", "2", "3"]
`))
	if err != nil {
		panic(err)
	}
	store, err := cfg.OpenStore(lease.Options{Replica: "my-service-1"})
	if err != nil {
		panic(err)
	}
	defer store.Stop(context.Background()) //nolint:errcheck // after the scheduler's
	s, err := scheduler.New(cfg, scheduler.Options{Store: store, Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := s.Start(context.Background()); err != nil {
		panic(err)
	}
	// … the program's own work, then …
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the runs' shutdown timeout
	defer cancel()
	s.Stop(ctx) //nolint:errcheck // nil
}
