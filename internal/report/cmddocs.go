package report

// The documents of the operator commands that act (unlock, pause and
// resume, trigger, forget, migrate) and of tickd check: with the status
// and history documents (json.go), every -json document lives in this
// package.

// UnlockDoc is `tickd unlock -json`.
type UnlockDoc struct {
	Task   string  `json:"task"`
	Entity string  `json:"entity"`
	Holder string  `json:"holder"`
	Fence  int64   `json:"fence"`
	Since  Instant `json:"since"`
	By     string  `json:"by"`
	// Freed: the lease is free now (-force); otherwise it is revoked, and
	// free once its holder has stopped, at the latest in free_within_s.
	Freed      bool    `json:"freed"`
	FreeWithin float64 `json:"free_within_s"`
	Said       string  `json:"said"`
}

// MigrateDoc is `tickd migrate -json`: what was moved into the key layout.
type MigrateDoc struct {
	Layout    int          `json:"layout"`
	From      int          `json:"from"` // the layout before (0: already this one)
	Tasks     int          `json:"tasks"`
	Due       int          `json:"due"`
	Resharded []ReshardDoc `json:"resharded"`
}

// ReshardDoc is one task `tickd migrate` resharded.
type ReshardDoc struct {
	Task      string `json:"task"`
	From      int    `json:"from"`
	To        int    `json:"to"`
	Entities  int    `json:"entities"`
	FollowUps int    `json:"followups"`
	Due       int    `json:"due"`
	// Took is how long the move took: nothing of the task was granted,
	// renewed, released or enqueued meanwhile.
	Took float64 `json:"took_s"`
}

// PauseDoc is `tickd pause -json` and `tickd resume -json`.
type PauseDoc struct {
	Task    string  `json:"task"`
	Paused  bool    `json:"paused"`
	Changed bool    `json:"changed"` // false: it was already so, and nothing was recorded
	By      string  `json:"by"`      // who did this
	Reason  string  `json:"reason"`
	Until   Instant `json:"until"` // a pause's end; null: until resumed
	Said    string  `json:"said"`
}

// TriggerDoc is `tickd trigger -json`: what was triggered and, with -wait,
// each outcome (runs is [] without -wait).
type TriggerDoc struct {
	Task      string          `json:"task"`
	Triggered int             `json:"triggered"`
	Paused    bool            `json:"paused"` // the runs wait until the task is resumed
	Runs      []TriggerRunDoc `json:"runs"`
	// Busy are the entities held when the runs were asked for (of the
	// first 100): each run waits for its holder to end.
	Busy []TriggerBusyDoc `json:"busy"`
}

// TriggerBusyDoc is an entity a trigger found held.
type TriggerBusyDoc struct {
	Entity string  `json:"entity"`
	Holder string  `json:"holder"`
	Since  Instant `json:"since"`
	Said   string  `json:"-"` // for people
}

type TriggerRunDoc struct {
	Entity  string `json:"entity"`
	Outcome string `json:"outcome"`
	// For an outcome of "pending": where the run was when -timeout passed,
	// "running" (since it started) or "queued" (since it was due), or
	// "unknown"; "" and null otherwise.
	State string  `json:"state"`
	Since Instant `json:"since"`
	Where string  `json:"-"` // the same, for people
}

// CheckDoc is `tickd check -json`: each task's next ticks from -from (or
// now), where leases live, what would fail at run time on this host, and
// with -redis whether Redis answers.
type CheckDoc struct {
	Tasks    []CheckTaskDoc `json:"tasks"`
	Leases   string         `json:"leases"` // "in-process", or "redis " and where
	Redis    string         `json:"redis"`  // "answers" with -redis, else ""
	Warnings []string       `json:"warnings"`
	Limits   []CheckLimit   `json:"limits"`
}

// CheckLimit is one [[limits]] entry: what it bounds, in words, and the
// tasks that share it.
type CheckLimit struct {
	Name  string   `json:"name"`
	Says  string   `json:"says"`
	Tasks []string `json:"tasks"`
}

type CheckTaskDoc struct {
	Name     string         `json:"name"`
	Schedule string         `json:"schedule"`
	Timezone string         `json:"timezone"`
	Source   string         `json:"source"`
	Ticks    []CheckTickDoc `json:"ticks"`
	// Shards is the config's shard count; RecordedShards the one recorded
	// in Redis, in force (check -redis; 0 without it).
	Shards         int `json:"shards"`
	RecordedShards int `json:"recorded_shards"`
	// Entities are, with -entity, that entity in this task: found in its
	// source or not, its attributes, its zone and its next ticks there;
	// [] without -entity.
	Entities []CheckEntityDoc `json:"entities"`
}

// CheckEntityDoc is one entity of a task, for check -entity.
type CheckEntityDoc struct {
	ID         string            `json:"id"`
	Found      bool              `json:"found"` // listed by the task's source
	Attributes map[string]string `json:"attributes"`
	// Timezone is the zone its ticks are in: its own (timezone_from), else
	// the task's; "" for a zone that is unknown (its runs are skipped).
	Timezone string         `json:"timezone"`
	Ticks    []CheckTickDoc `json:"ticks"` // local_time in Timezone
}

// CheckTickDoc is one tick: the Instant, its wall-clock time in the task's
// zone, and how daylight saving shaped it ("" when it did not).
type CheckTickDoc struct {
	Tick  Instant `json:"tick"`
	Local string  `json:"local_time"`
	DST   string  `json:"dst"`
}

// ForgetDoc is `tickd forget -json`.
type ForgetDoc struct {
	Task   string `json:"task"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// BackfillListDoc is `tickd backfill -json` without a task: every backfill kept.
type BackfillListDoc struct {
	Backfills []BackfillDoc `json:"backfills"`
}
