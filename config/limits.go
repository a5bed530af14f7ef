package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit is one [[limits]] entry: a budget every replica shares, which the
// tasks that name it (Task.Limits) start their runs under.
type Limit struct {
	// Name identifies the limit in tasks' limits, logs and metrics: letters,
	// digits and . _ - . Required.
	Name string `toml:"name"`
	// Concurrency is how many runs hold the limit at once, across every
	// replica. Defaults to 0 (no bound); one of concurrency and rate is
	// required.
	Concurrency int `toml:"concurrency"`
	// Rate is how many runs start per second, minute or hour, across every
	// replica: "20/s", "100/m", "5000/h"; or "auto", the rate the API's
	// answers say (RateLimit-Policy, X-RateLimit-*), learned from its 429s
	// when they say none. Defaults to "" (no bound).
	Rate string `toml:"rate"`
	// RateMax bounds a rate = "auto": "50/s". Defaults to "" (no bound).
	RateMax string `toml:"rate_max"`
	// Burst is how many starts may go at once above the rate. Defaults to 1.
	Burst int `toml:"burst"`
	// Per is "all" (one budget for every run under the limit) or "entity"
	// (a budget per entity id: an API token per shop). Defaults to "all".
	Per string `toml:"per"`
	// MaxBackoff bounds how long an API's answer (a 429's Retry-After)
	// closes the limit. Defaults to 10m.
	MaxBackoff time.Duration `toml:"max_backoff"`
	// FairBy names an entity attribute that puts runs in groups (a
	// tenant): the groups with runs waiting take turns, each getting its
	// share of the limit whatever its number of runs, the oldest first
	// inside a group. Entities without it are one group. Defaults to ""
	// (one line, the oldest first); only with per = "all".
	FairBy string `toml:"fair_by"`
	// WeightFrom names an entity attribute that gives its group's share
	// against the others' (a whole number, 1 to 1000; 1 when absent).
	// Defaults to "" (every group 1); only with fair_by.
	WeightFrom string `toml:"weight_from"`

	// Derived by validation: the rate's starts and period, and rate_max's.
	RateN      int           `toml:"-"`
	RatePer    time.Duration `toml:"-"`
	RateMaxN   int           `toml:"-"`
	RateMaxPer time.Duration `toml:"-"`
}

// RateAuto is the rate of a limit that learns it from its API's answers.
const RateAuto = "auto"

// DefaultLimit is a [[limits]] entry's built-in defaults.
func DefaultLimit() Limit { return Limit{Burst: 1, Per: "all", MaxBackoff: 10 * time.Minute} }

// String says the limit in words: "8 at once, 20/s (burst 5), per entity".
func (l *Limit) String() string {
	var parts []string
	if l.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", l.Concurrency))
	}
	if l.Rate != "" {
		r := l.Rate
		if l.Rate == RateAuto && l.RateMax != "" {
			r += " (at most " + l.RateMax + ")"
		}
		if l.Burst > 1 {
			r += fmt.Sprintf(" (burst %d)", l.Burst)
		}
		parts = append(parts, r)
	}
	if l.Per == "entity" {
		parts = append(parts, "per entity")
	}
	if l.FairBy != "" {
		fair := "fair by " + l.FairBy
		if l.WeightFrom != "" {
			fair += " (weight " + l.WeightFrom + ")"
		}
		parts = append(parts, fair)
	}
	return strings.Join(parts, ", ")
}

// parseRate reads a rate such as "20/s", "100/m" or "5000/h".
func parseRate(s string) (n int, per time.Duration, err error) {
	num, unit, ok := strings.Cut(s, "/")
	pers := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}
	per, okUnit := pers[unit]
	n, errN := strconv.Atoi(num)
	if !ok || !okUnit || errN != nil || n < 1 {
		return 0, 0, fmt.Errorf("%q: want starts per second, minute or hour, e.g. \"20/s\", \"100/m\", \"5000/h\"", s)
	}
	return n, per, nil
}

// decodeLimits decodes and checks the [[limits]] tables.
func decodeLimits(d *decoder, raw any) []Limit {
	ts, ok := raw.([]map[string]any)
	if !ok {
		d.bad("limits", "want [[limits]] tables, got %s", describe(raw))
		return nil
	}
	var out []Limit
	seen := map[string]int{}
	for i, tr := range ts {
		key := fmt.Sprintf("limits[%d]", i)
		l := DefaultLimit()
		given := d.table(key, tr, &l)
		bad := func(k, format string, args ...any) { d.bad(key+"."+k, format, args...) }
		switch {
		case l.Name == "" && !given["name"]:
			bad("name", "required: a name tasks give in their limits")
		case !nameRE.MatchString(l.Name) || len(l.Name) > 200:
			bad("name", "%q: letters, digits and . _ - only (at most 200)", l.Name)
		default:
			if j, dup := seen[l.Name]; dup {
				bad("name", "duplicate limit name %q (also limits[%d])", l.Name, j)
			}
			seen[l.Name] = i
		}
		if l.Concurrency < 0 {
			bad("concurrency", "%d: must not be negative (0: no bound)", l.Concurrency)
		}
		checkRates(&l, bad)
		if l.Concurrency == 0 && l.Rate == "" && !d.failedUnder(key) {
			d.bad(key, "give concurrency, rate or both: a limit with neither bounds nothing")
		}
		if l.Burst < 1 {
			bad("burst", "%d: at least 1", l.Burst)
		}
		if l.Per != "all" && l.Per != "entity" {
			bad("per", "%q: use \"all\" (one budget) or \"entity\" (one per entity id)", l.Per)
		}
		if l.MaxBackoff < time.Second {
			bad("max_backoff", "%v: at least 1s", l.MaxBackoff)
		}
		checkFair(&l, bad)
		out = append(out, l)
	}
	return out
}

// checkRates checks rate and rate_max.
func checkRates(l *Limit, bad badFunc) {
	var err error
	if l.Rate != "" && l.Rate != RateAuto {
		if l.RateN, l.RatePer, err = parseRate(l.Rate); err != nil {
			bad("rate", "%v, or \"auto\" (the rate the API's answers say)", err)
		}
	}
	switch {
	case l.RateMax != "" && l.Rate != RateAuto:
		bad("rate_max", "bounds a rate = \"auto\": give rate = \"auto\", or drop it")
	case l.RateMax != "":
		if l.RateMaxN, l.RateMaxPer, err = parseRate(l.RateMax); err != nil {
			bad("rate_max", "%v", err)
		}
	}
}

// checkFair checks fair_by and weight_from.
func checkFair(l *Limit, bad badFunc) {
	checkAttrName(bad, "fair_by", l.FairBy)
	checkAttrName(bad, "weight_from", l.WeightFrom)
	switch {
	case l.FairBy != "" && l.Per == "entity":
		bad("fair_by", "is for a budget shared by many entities (per = \"all\"): an entity's own budget has one group")
	case l.WeightFrom != "" && l.FairBy == "":
		bad("weight_from", "weighs the groups of fair_by: give fair_by")
	}
}

// checkTaskLimits checks that the limits each task names (or [defaults]
// gives it) are declared.
func checkTaskLimits(d *decoder, cfg *Config, tasksRaw []map[string]any, defaults []string) {
	names := make([]string, len(cfg.Limits))
	for i, l := range cfg.Limits {
		names[i] = l.Name
	}
	for i, tr := range tasksRaw {
		key := fmt.Sprintf("tasks[%d].limits", i)
		given := defaults
		if raw, ok := tr["limits"]; ok {
			var err error
			if given, err = stringList(raw); err != nil {
				continue // reported by the task's decoding
			}
		} else {
			key = "defaults.limits"
		}
		var fair *Limit
		for _, n := range given {
			if l, ok := cfg.Limit(n); ok {
				if l.FairBy != "" && fair != nil && (l.FairBy != fair.FairBy || l.WeightFrom != fair.WeightFrom) {
					d.bad(key, "%q and %q group runs differently (fair_by, weight_from): a task's fair limits must agree", fair.Name, l.Name)
				}
				if l.FairBy != "" {
					fair = l
				}
				continue
			}
			hint := ""
			if c := closest(n, names); c != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			d.bad(key, "%q is no [[limits]] name%s", n, hint)
		}
		if key == "defaults.limits" {
			defaults = nil // said once
		}
	}
}

// Limit returns the limit named name.
func (c *Config) Limit(name string) (*Limit, bool) {
	for i := range c.Limits {
		if c.Limits[i].Name == name {
			return &c.Limits[i], true
		}
	}
	return nil, false
}

// Fair is the fair limit among t's limits, if it names any (they agree on
// fair_by and weight_from): how its runs are grouped in their lines.
func (c *Config) Fair(t *Task) (*Limit, bool) {
	for _, n := range t.Limits {
		if l, ok := c.Limit(n); ok && l.FairBy != "" {
			return l, true
		}
	}
	return nil, false
}

// LimitUsers are the tasks that name each limit, by limit name.
func (c *Config) LimitUsers() map[string][]string {
	out := map[string][]string{}
	for _, t := range c.Tasks {
		for _, n := range t.Limits {
			out[n] = append(out[n], t.Name)
		}
	}
	return out
}
