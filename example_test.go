package tickd_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tickd/tickd"
	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/tasks"
)

// A program embedding tickd with its own Go handler, its config read from
// TOML. Without a [redis] table the leases are in-process (one replica);
// with one, every process that opens the same config shares the work.
func ExampleOpen() {
	handlers := &tasks.Registry{}
	done := make(chan string, 1)
	handlers.Register("greet", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck // one name
		// Pass ctx to everything that waits, and return when it is done:
		// it is cancelled when the run must stop.
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
	t, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, ReplicaID: "example", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := t.Start(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(<-done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the runs' shutdown timeout
	defer cancel()
	if err := t.Stop(ctx); err != nil {
		panic(err)
	}
	// Output: hello, world
}

// A test of a program embedding tickd waits on tickd's events, not on the
// clock: here, for the first run of each entity to end.
func ExampleOptions_onEvent() {
	handlers := &tasks.Registry{}
	handlers.Register("sync-user", func(ctx context.Context, r tasks.Run) (tasks.Result, error) { //nolint:errcheck // one name
		return tasks.Done, nil
	})
	cfg, err := config.Parse("embedded.toml", []byte(`
[[tasks]]
name = "sync-users"
every = "1h"
catch_up = "1h"
handler = "sync-user"
entities = ["u1", "u2"]
`))
	if err != nil {
		panic(err)
	}
	ended := make(chan tickd.Event, 16)
	t, err := tickd.Open(cfg, tickd.Options{Handlers: handlers, ReplicaID: "example", Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(e tickd.Event) {
			if e.Kind == tickd.EventRunEnded {
				ended <- e
			}
		}})
	if err != nil {
		panic(err)
	}
	if err := t.Start(context.Background()); err != nil {
		panic(err)
	}
	seen := map[string]string{}
	for len(seen) < 2 {
		e := <-ended
		seen[e.Entity] = e.Outcome
	}
	fmt.Println("u1:", seen["u1"], "u2:", seen["u2"])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Stop(ctx); err != nil {
		panic(err)
	}
	// Output: u1: done u2: done
}
