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
	store := lease.NewMemory(lease.Options{Replica: "example"})
	defer store.Close()
	s, err := scheduler.New(cfg, scheduler.Options{Store: store, Registry: reg})
	if err != nil {
		panic(err)
	}
	s.Start()
	fmt.Println(<-done)
	s.Shutdown(time.Second)
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
	store, closeStore, err := cfg.OpenStore(lease.Options{Replica: "my-service-1"})
	if err != nil {
		panic(err)
	}
	defer closeStore() //nolint:errcheck
	s, err := scheduler.New(cfg, scheduler.Options{Store: store, Registry: reg})
	if err != nil {
		panic(err)
	}
	s.Start()
	defer s.Shutdown(30 * time.Second)
	// … the program's own work …
}
