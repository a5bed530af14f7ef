package config_test

import (
	"fmt"
	"time"

	"github.com/tickd/tickd/config"
)

// A config built in code: each task starts from DefaultTask and is
// validated as a file's would be.
func ExampleNew() {
	t := config.DefaultTask()
	t.Name, t.Every, t.Handler = "sync-users", 15*time.Minute, "sync-user"
	t.Entities = []string{"1", "2", "3"}
	cfg, err := config.New(config.DefaultDaemon(), nil, t)
	if err != nil {
		panic(err)
	}
	next := cfg.Tasks[0].Schedule.Next(time.Date(2026, 11, 22, 12, 7, 0, 0, time.UTC))
	fmt.Println(next.Format(time.RFC3339))

	bad := config.DefaultTask()
	bad.Name, bad.Every, bad.Command = "oops", 90*time.Millisecond, []string{"true"}
	_, err = config.New(config.DefaultDaemon(), nil, bad)
	fmt.Println(err)
	// Output:
	// 2026-11-22T12:15:00Z
	// (code): tasks[0].every: 90ms: must be a whole number of seconds, at least 1s
}
