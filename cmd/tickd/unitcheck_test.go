package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestCheckWarnsOfAUnitThatKillsTheStop: tickd check warns when the
// installed unit's TimeoutStopSec (a drop-in's winning over the unit's)
// would SIGKILL tickd before shutdown_timeout and the hand-over are over,
// and says the drop-in that fixes it; a long enough one, or none, is not
// warned about.
func TestCheckWarnsOfAUnitThatKillsTheStop(t *testing.T) {
	root := t.TempDir()
	etc, lib := filepath.Join(root, "etc"), filepath.Join(root, "lib")
	saved := unitDirs
	unitDirs = []string{etc, lib}
	t.Cleanup(func() { unitDirs = saved })
	unit, err := os.ReadFile(filepath.Join("..", "..", "systemd", "tickd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{lib, filepath.Join(etc, "tickd.service.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tickdtest.WriteFile(t, filepath.Join(lib, "tickd.service"), string(unit))
	cfg := filepath.Join(root, "tickd.toml")
	check := func(shutdown string) string {
		t.Helper()
		tickdtest.WriteFile(t, cfg, fmt.Sprintf("[daemon]\nshutdown_timeout = %q\n[[tasks]]\nname = \"a\"\nevery = \"1h\"\ncommand = [\"true\"]\n", shutdown))
		code, _, errs := cli("check", "-config", cfg)
		expect.Equal(t, "check's exit status", code, 0)
		return errs
	}
	expect.Equal(t, "the packaged unit with the default shutdown_timeout (30s): no warning", check("30s"), "")
	errs := check("60s")
	expect.True(t, "shutdown_timeout 60s under the unit's 50s: warned, with the fix:\n"+errs,
		strings.Contains(errs, "TimeoutStopSec=50s") && strings.Contains(errs, "systemctl edit tickd.service: TimeoutStopSec=1m15s"))
	tickdtest.WriteFile(t, filepath.Join(etc, "tickd.service.d", "stop.conf"), "[Service]\nTimeoutStopSec=1min 30s\n")
	expect.Equal(t, "a drop-in's 90s: no warning", check("60s"), "")
	tickdtest.WriteFile(t, filepath.Join(etc, "tickd.service.d", "zz.conf"), "[Service]\nTimeoutStopSec=40\n")
	expect.True(t, "a later drop-in's 40s wins", strings.Contains(check("60s"), "TimeoutStopSec=40s"))
	d, ok := parseTimespan("2min 500ms")
	expect.True(t, fmt.Sprintf("2min 500ms: %v", d), ok && d == 2*time.Minute+500*time.Millisecond)
	_, ok = parseTimespan("infinity")
	expect.True(t, "infinity is no bound", !ok)
}
