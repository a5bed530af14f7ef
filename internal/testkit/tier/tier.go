// Package tier sorts the tests in two tiers. `go test -short ./... ./cmd/tickd/...` is the
// quick tier a contributor runs before each commit (a few minutes on two
// cores, no root, no network, no podman, no Chromium, no Redis Cluster: a
// redis-server on PATH is all it needs); `go test ./...`, what CI runs, is
// the full suite. A test of the full tier only calls Full first: under
// -short it is skipped, saying what it needs; without -short it runs, and
// fails if what it needs is missing.
package tier

import (
	"flag"
	"strconv"
	"testing"
)

// Full marks t as a test of the full tier only; needs says why (what it
// needs, or how long it runs).
func Full(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skip("full tier only (" + needs + "): go test without -short runs it")
	}
}

// Parallel sets how many tests marked t.Parallel run at once to n, unless
// the command line set it (-parallel): a TestMain calls it, after
// flag.Parse, for a package whose parallel tests mostly wait (for ticks,
// for leases to expire) rather than compute. go test's default is the
// number of CPUs, two on a small machine.
func Parallel(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(n)) //nolint:errcheck // the flag exists once testing's flags are parsed
	}
}
