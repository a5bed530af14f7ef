package scheduler

import (
	"flag"
	"os"
	"testing"

	"github.com/tickd/tickd/internal/testkit/tier"
)

// TestMain runs the scheduler's tests, each on a Redis of its own (or an
// in-process store) and mostly waiting for ticks: up to four at once.
func TestMain(m *testing.M) {
	flag.Parse()
	tier.Parallel(4)
	os.Exit(m.Run())
}
