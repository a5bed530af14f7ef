package redisdriver

import (
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// TestTickPartKeepsTheSourceError: a failed source's error, whatever it
// holds, comes back whole from a tick part; a part from before it was kept
// ("1" alone) still reads as failed.
func TestTickPartKeepsTheSourceError(t *testing.T) {
	hostile := "exit status 3: a b|c\n#%:é " + strings.Repeat("x", driver.MaxSourceError)
	p := driver.TickPart{Replica: "r 1", Written: time.UnixMilli(1000), SourceFailed: true, SourceError: hostile,
		Outcomes: map[driver.Outcome]int{}, Skipped: map[string]int{}, FirstStart: -1, LastEnd: -1}
	back, err := decodeTickPart(encodeTickPart(p.Kept()))
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "source error, cut to driver.MaxSourceError", back.SourceError, hostile[:driver.MaxSourceError])
	expect.True(t, "source failed", back.SourceFailed)
	old := strings.TrimSuffix(encodeTickPart(p.Kept()), ":"+driver.Escape(hostile[:driver.MaxSourceError]))
	back, err = decodeTickPart(old)
	expect.Equal(t, "an older part's error", err, nil)
	expect.True(t, "an older part still failed", back.SourceFailed && back.SourceError == "")
}

// TestTickPartKeepsItsZones: a part's zones come back whole, hostile names
// too; a part without zones is encoded as before them (ten fields).
func TestTickPartKeepsItsZones(t *testing.T) {
	p := driver.TickPart{Replica: "r", Written: time.UnixMilli(1000), FirstStart: -1, LastEnd: -1,
		Zones: []string{"Europe/Berlin", "America/New_York", "a,b|c d%"}}
	back, err := decodeTickPart(encodeTickPart(p.Kept()))
	if err != nil {
		t.Fatal(err)
	}
	expect.Same(t, "zones", back.Zones, []string{"America/New_York", "Europe/Berlin", "a,b|c d%"})
	p.Zones = nil
	expect.Equal(t, "fields without zones", strings.Count(encodeTickPart(p.Kept()), "|"), 9)
}
