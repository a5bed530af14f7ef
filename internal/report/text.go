package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Counts writes a count map as "done 3, failed 1", by name, or none for an
// empty map.
func Counts[K ~string](m map[K]int, none string) string {
	if len(m) == 0 {
		return none
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Millis writes a duration from a tick to the millisecond, or "-" for none
// (a negative one: driver.TickPart's FirstStart and LastEnd).
func Millis(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
