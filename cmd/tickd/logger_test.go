package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/scheduler"
)

// TestLogDurationsAsText: JSON and text log lines write durations one way,
// as Go writes them ("5s"), never as integers of nanoseconds.
func TestLogDurationsAsText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var b bytes.Buffer
		var level slog.LevelVar
		log := newLogger(scheduler.Daemon{LogLevel: "info", LogFormat: format}, &b, &level)
		log.Warn("run still going", "running_for", 5*time.Second, "took", 1500*time.Millisecond)
		out := b.String()
		for _, want := range map[string][]string{"json": {`"running_for":"5s"`, `"took":"1.5s"`}, "text": {"running_for=5s", "took=1.5s"}}[format] {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q lacks %s", format, out, want)
			}
		}
	}
}
