//go:build !tickd_testclock

package main

import (
	"log/slog"

	"github.com/tickd/tickd/internal/lease"
)

// newClock is the daemon's wall clock. A test build (clock_testclock.go)
// can shift it; this one cannot.
func newClock(*slog.Logger) lease.SystemClock { return lease.SystemClock{} }
