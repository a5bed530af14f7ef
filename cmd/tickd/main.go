// Command tickd is a scheduler daemon for recurring singleton tasks.
package main

import (
	"context"
	"os"
	_ "time/tzdata" // every timezone works on a host or container without tzdata (about 450 KB)

	_ "github.com/tickd/tickd/internal/earlysignal" // signals are tickd's before its packages are initialized
	"github.com/tickd/tickd/internal/pid1"
)

func main() {
	// PID 1 (a container's first process): an init that reaps orphans and
	// runs tickd as its child (internal/pid1).
	if code, ok := pid1.Init(); ok {
		os.Exit(code)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
