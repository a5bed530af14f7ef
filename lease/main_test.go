package lease

import (
	"os"
	"testing"

	"github.com/tickd/tickd/internal/testkit/timedtests"
)

// TestMain runs the lease tests, which judge how soon a lease stops, never
// beside the other packages that judge timing.
func TestMain(m *testing.M) { os.Exit(timedtests.Run(m)) }
