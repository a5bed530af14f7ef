package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/config"
	"github.com/tickd/tickd/internal/regular"
)

// unitDirs are where systemd reads tickd's units and their drop-ins from,
// the ones read last first (tests point it elsewhere).
var unitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// stopGrace is what a stop takes beyond shutdown_timeout: the SIGTERM to
// SIGKILL grace of the runs still going, then releasing their leases.
const stopGrace = 15 * time.Second

// unitWarnings warns when a tickd unit on this host would SIGKILL tickd
// during its stop's hand-over: its TimeoutStopSec (drop-ins included) is
// shorter than the config's shutdown_timeout and stopGrace. A killed stop
// leaves leases held until they expire.
func unitWarnings(cfg *config.Config) []string {
	var ws []string
	need := cfg.Daemon.ShutdownTimeout + stopGrace
	for _, unit := range []string{"tickd.service", "tickd@.service"} {
		timeout, from, ok := unitStopTimeout(unit)
		if ok && timeout < need {
			ws = append(ws, fmt.Sprintf("%s: TimeoutStopSec=%v (%s) is shorter than [daemon] shutdown_timeout (%v) + %v for the stop's hand-over: systemd would kill tickd during it; raise it in a drop-in (systemctl edit %s: TimeoutStopSec=%v)",
				unit, timeout, from, cfg.Daemon.ShutdownTimeout, stopGrace, unit, need.Round(time.Second)))
		}
	}
	return ws
}

// unitStopTimeout reads unit's TimeoutStopSec as systemd would: the unit
// file found first in unitDirs, then its drop-ins by name, the last
// setting winning. ok is false when no unit is installed or it sets none
// (systemd's default, 90s, then applies: no warning either way).
func unitStopTimeout(unit string) (d time.Duration, from string, ok bool) {
	var files []string
	for _, dir := range unitDirs {
		if _, err := os.Stat(filepath.Join(dir, unit)); err == nil {
			files = append(files, filepath.Join(dir, unit))
			break
		}
	}
	if len(files) == 0 {
		return 0, "", false
	}
	var dropIns []string
	seen := map[string]bool{}
	for _, dir := range unitDirs { // a drop-in's name read first shadows the same name later
		ms, _ := filepath.Glob(filepath.Join(dir, unit+".d", "*.conf"))
		for _, m := range ms {
			if !seen[filepath.Base(m)] {
				seen[filepath.Base(m)] = true
				dropIns = append(dropIns, m)
			}
		}
	}
	slices.SortFunc(dropIns, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	for _, f := range append(files, dropIns...) {
		if v, set := stopSetting(f); set {
			if d, ok = parseTimespan(v); ok {
				from = f
			}
		}
	}
	return d, from, ok
}

// stopSetting is the last TimeoutStopSec= of file f.
func stopSetting(f string) (v string, set bool) {
	fh, err := regular.Open(f, 1<<20)
	if err != nil {
		return "", false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, found := strings.CutPrefix(strings.TrimSpace(sc.Text()), "TimeoutStopSec="); found {
			v, set = strings.TrimSpace(rest), true
		}
	}
	return v, set
}

// timespanPart is one part of a systemd time span: 1min, 30s, 500ms, 50.
var timespanPart = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*(us|ms|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours)?$`)

// parseTimespan parses a systemd time span; "infinity" and what it cannot
// read are not ok.
func parseTimespan(v string) (time.Duration, bool) {
	units := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "": time.Second, "s": time.Second, "sec": time.Second,
		"secs": time.Second, "second": time.Second, "seconds": time.Second, "m": time.Minute, "min": time.Minute, "mins": time.Minute,
		"minute": time.Minute, "minutes": time.Minute, "h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour}
	var total time.Duration
	parts := strings.Fields(v)
	if len(parts) == 0 {
		return 0, false
	}
	for _, p := range parts {
		m := timespanPart.FindStringSubmatch(p)
		if m == nil {
			return 0, false
		}
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, false
		}
		total += time.Duration(n * float64(units[m[2]]))
	}
	return total, true
}
