package memdriver_test

import (
	"testing"

	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/lease/drivertest"
	"github.com/tickd/tickd/lease/memdriver"
)

// TestConformance is the in-process driver's tests, drivertest alone, as
// a third driver's would be: every case with each task in one shard, then
// in 4; and every method of the contract called by some case. One
// store runs on the one driver of each case's kit.
func TestConformance(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(map[int]string{1: "one-shard", 4: "four-shards"}[n], func(t *testing.T) {
			t.Parallel()
			drivertest.RunSharded(t, n, func(*testing.T) drivertest.Kit {
				d := memdriver.New()
				return func() driver.Driver { return d }
			})
		})
	}
}
