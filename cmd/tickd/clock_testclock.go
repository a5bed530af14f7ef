//go:build tickd_testclock

package main

import (
	"log/slog"
	"os"
	"time"
)

// offsetClock adds TICKD_TEST_CLOCK_OFFSET to every wall-clock reading of
// the daemon (tickd run only; the operator commands read the real clock):
// the fault suite's replicas with skewed clocks run a tickd built with the
// tickd_testclock tag (faketime cannot shift a Go binary's clock). The
// binaries users run have no such seam (clock.go).
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

func newClock(log *slog.Logger) offsetClock {
	d, _ := time.ParseDuration(os.Getenv("TICKD_TEST_CLOCK_OFFSET"))
	if d != 0 {
		log.Warn("TICKD_TEST_CLOCK_OFFSET is set: the wall clock is shifted (a test build)", "offset", d.String())
	}
	return offsetClock{d}
}
