// Package timedtests keeps the test packages that judge timing (a lease
// stopped before it could expire, every tick run within its window) from
// running at the same time as one another: on a machine of two cores, the
// fault suite's replicas and workers starve another package's keeper of
// the CPU for most of a second, and that package then fails for the load,
// not for tickd. Each such package's TestMain holds a lock on a file in
// the temp dir while its tests run; `go test ./...` still runs every other
// package beside them.
package timedtests

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Run runs m's tests while holding the lock, waiting for it first. Under
// -short (the quick tier, whose tests put little load on the machine: no
// fault scenario, no fleet of replicas) it takes no lock.
func Run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	path := filepath.Join(os.TempDir(), "tickd-timed-tests.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		fmt.Fprintf(os.Stderr, "timedtests: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		fmt.Fprintf(os.Stderr, "timedtests: lock %s: %v\n", path, err)
		return 1
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks it anyway
	return m.Run()
}
