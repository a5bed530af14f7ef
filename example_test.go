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
