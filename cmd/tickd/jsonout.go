package main

import "github.com/tickd/tickd/internal/report"

// unlockDoc is `tickd unlock -json`.
type unlockDoc struct {
	Task   string         `json:"task"`
	Entity string         `json:"entity"`
	Holder string         `json:"holder"`
	Fence  int64          `json:"fence"`
	Since  report.Instant `json:"since"`
	By     string         `json:"by"`
	// Freed: the lease is free now (-force); otherwise it is revoked, and
	// free once its holder has stopped, at the latest in free_within_s.
	Freed      bool    `json:"freed"`
	FreeWithin float64 `json:"free_within_s"`
	Said       string  `json:"said"`
}

// migrateDoc is `tickd migrate -json`: what was moved into the key layout.
type migrateDoc struct {
	Layout int `json:"layout"`
	Tasks  int `json:"tasks"`
	Due    int `json:"due"`
}

// pauseDoc is `tickd pause -json` and `tickd resume -json`.
type pauseDoc struct {
	Task    string         `json:"task"`
	Paused  bool           `json:"paused"`
	Changed bool           `json:"changed"` // false: it was already so, and nothing was recorded
	By      string         `json:"by"`      // who did this
	Reason  string         `json:"reason"`
	Until   report.Instant `json:"until"` // a pause's end; null: until resumed
	Said    string         `json:"said"`
}

// triggerDoc is `tickd trigger -json`: what was triggered and, with -wait,
// each outcome (runs is [] without -wait).
type triggerDoc struct {
	Task      string          `json:"task"`
	Triggered int             `json:"triggered"`
	Paused    bool            `json:"paused"` // the runs wait until the task is resumed
	Runs      []triggerRunDoc `json:"runs"`
}

type triggerRunDoc struct {
	Entity  string `json:"entity"`
	Outcome string `json:"outcome"`
	// For an outcome of "pending": where the run was when -timeout passed,
	// "running" (since it started) or "queued" (since it was due), or
	// "unknown"; "" and null otherwise.
	State string         `json:"state"`
	Since report.Instant `json:"since"`
	where string         // the same, for people
}

// checkDoc is `tickd check -json`: each task's next ticks from -from (or
// now), where leases live, what would fail at run time on this host, and
// with -redis whether Redis answers.
type checkDoc struct {
	Tasks    []checkTaskDoc `json:"tasks"`
	Leases   string         `json:"leases"` // "in-process", or "redis " and where
	Redis    string         `json:"redis"`  // "answers" with -redis, else ""
	Warnings []string       `json:"warnings"`
}

type checkTaskDoc struct {
	Name     string         `json:"name"`
	Schedule string         `json:"schedule"`
	Timezone string         `json:"timezone"`
	Source   string         `json:"source"`
	Ticks    []checkTickDoc `json:"ticks"`
}

// checkTickDoc is one tick: the report.Instant, its wall-clock time in the task's
// zone, and how daylight saving shaped it ("" when it did not).
type checkTickDoc struct {
	Tick  report.Instant `json:"tick"`
	Local string         `json:"local_time"`
	DST   string         `json:"dst"`
}
