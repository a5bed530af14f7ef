package lease

import (
	"flag"
	"os"
	"testing"

	"github.com/tickd/tickd/internal/testkit/tier"
	"github.com/tickd/tickd/internal/testkit/timedtests"
)

// TestMain runs the lease tests, which judge how soon a lease stops, never
// beside the other packages that judge timing. Their parallel tests (the
// conformance suite's stores, each on a Redis of its own) mostly wait for
// leases to expire: up to six run at once.
func TestMain(m *testing.M) {
	flag.Parse()
	tier.Parallel(6)
	os.Exit(timedtests.Run(m))
}
