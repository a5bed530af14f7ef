package console

import (
	"encoding/hex"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/tickd/tickd/internal/history"
	"github.com/tickd/tickd/internal/report"
	"github.com/tickd/tickd/internal/telemetry"
	"github.com/tickd/tickd/lease/driver"
)

// shownTime is how every page shows a time (the task's zone on a task's
// pages, else UTC); app.js adds the viewer's, in the same form.
const shownTime = "2006-01-02 15:04:05 MST"

// funcs are the templates' helpers. None of them returns template.HTML:
// everything a page shows is escaped by html/template.
var funcs = template.FuncMap{
	"utc": func(t time.Time) string { return t.UTC().Format(shownTime) },
	// hex carries an exact id in a form: a browser turns a newline in a
	// field's value into CRLF when it submits it (entityIDs).
	"hex":     func(id string) string { return hex.EncodeToString([]byte(id)) },
	"zoned":   func(t time.Time, loc *time.Location) string { return t.In(loc).Format(shownTime) },
	"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"ago":     func(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() },
	"dur":     history.Millis,
	"round":   func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"counts":  func(m map[driver.Outcome]int) string { return history.Counts(m, "none") },
	"skips":   func(m map[string]int) string { return history.Counts(m, "none") },
	"why":     history.Why,
	"path":    url.PathEscape,
	"visible": report.Visible,
	// text is a run's output for a <pre>: each line visible (report.Visible),
	// its line breaks kept.
	"text": func(s string) string {
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			lines[i] = report.Visible(l)
		}
		return strings.Join(lines, "\n")
	},
	"join": func(ss []string) string {
		out := ""
		for i, s := range ss {
			if i > 0 {
				out += ", "
			}
			out += s
		}
		return out
	},
	"zero":  func(t time.Time) bool { return t.IsZero() },
	"count": count,
	"add": func(ns ...int) int {
		sum := 0
		for _, n := range ns {
			sum += n
		}
		return sum
	},
	"chart": chartOf,
	"ping":  endPing,
	// trace is the id of the trace of a task's tick, the same on every
	// replica (internal/telemetry).
	"trace": func(task string, tick time.Time) string { return telemetry.TickTrace(task, tick).String() },
}

// endPing is what the heartbeat's end ping of tick v says, as the replica
// that sends it judges the tick (internal/scheduler's beats): "success"
// or "fail" once the tick is over, "not yet" while it is not, "" for a tick
// no replica fanned out (no ping starts it).
func endPing(v history.TickView) string {
	switch v.State {
	case history.TickComplete, history.TickIncomplete:
		if history.Succeeded(v.TickRecord, v.State) {
			return "success"
		}
		return "fail"
	case history.TickRunning, history.TickWaiting:
		return "not yet"
	}
	return ""
}

// siteOf is a URL's scheme and host, never its path, query or
// credentials (a heartbeat URL's path is its check's secret).
func siteOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a URL that does not parse)"
	}
	return u.Scheme + "://" + u.Host
}

// count is n units, singular for one: "1 run", "3 runs".
func count(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
