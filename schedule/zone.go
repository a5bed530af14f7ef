package schedule

import (
	"strings"
	"sync"
	"time"
)

// zones caches the zones loaded by name, and the names that are none, up
// to maxZoneNames: a source that names more distinct zones than any
// database holds gets its new names refused unread.
var zones struct {
	sync.Mutex
	by map[string]*time.Location // nil: not a zone
}

const maxZoneNames = 10000

// LoadZone is the IANA zone name, if there is one, as an entity's zone
// attribute (a task's timezone_from) names it: loaded once, then shared.
// "Local" (this host's zone, which replicas need not share) and names no
// zone database could hold are refused unread, and once 10,000 names were
// asked for, new ones are refused.
func LoadZone(name string) (*time.Location, bool) {
	if name == "Local" || len(name) > 64 || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
		return nil, false
	}
	zones.Lock()
	defer zones.Unlock()
	if loc, ok := zones.by[name]; ok {
		return loc, loc != nil
	}
	if zones.by == nil {
		zones.by = map[string]*time.Location{}
	}
	if len(zones.by) >= maxZoneNames {
		return nil, false
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = nil
	}
	zones.by[name] = loc
	return loc, loc != nil
}
