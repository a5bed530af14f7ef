package tasks_test

import (
	"context"
	"fmt"

	"github.com/tickd/tickd/tasks"
)

// A Go program that embeds tickd registers its handlers under the names its
// config's `handler` keys use, and passes the registry to tickd.Open.
func ExampleRegistry() {
	reg := &tasks.Registry{}
	if err := reg.Register("demo-hello", func(_ context.Context, run tasks.Run) (tasks.Result, error) {
		run.Logger.Info("hello from a Go handler", "entity", run.Entity)
		return tasks.Done, nil
	}); err != nil {
		panic(err)
	}
	if err := reg.Register("sync-user", func(ctx context.Context, run tasks.Run) (tasks.Result, error) {
		// … sync run.Entity, fencing writes with run.Fence …
		return tasks.Done, nil
	}); err != nil {
		panic(err)
	}
	fmt.Println(reg.Names())
	// Output: [demo-hello sync-user]
}
