package config

import (
	"time"

	"github.com/tickd/tickd/lease/driver"
	"github.com/tickd/tickd/schedule"
)

// OnBusy says what a tick does for an entity whose lease is held.
type OnBusy string

// The values of catch_up_runs.
const (
	CatchUpLatest = "latest"
	CatchUpAll    = "all"
)

// MaxRunRecord bounds run_record: a year.
const MaxRunRecord = 366 * 24 * time.Hour

// MaxCatchUp bounds catch_up_max.
const MaxCatchUp = 10000

// MaxQueue bounds queue_max: the ticks buffered per entity.
const MaxQueue = 1000

// The values of on_busy.
const (
	OnBusySkip  OnBusy = "skip"  // skip the entity this tick
	OnBusyQueue OnBusy = "queue" // run once more right after the holder ends
	// OnBusyReplace stops the holder (as tickd unlock does) and runs the
	// new tick once it has ended, or once its lease has expired when it
	// never ends (a frozen process, a replica cut off).
	OnBusyReplace OnBusy = "replace"
)

// Task is one [[tasks]] entry with [defaults] and the built-in defaults
// applied, validated. Each key is declared once, here: its toml tag names it,
// DefaultTask gives its default, [defaults] and then the task's own table
// are decoded over that, and config.example.toml documents it.
type Task struct {
	// Name identifies the task in keys, logs and commands: letters, digits
	// and . _ - (at most 200). Required; it has no default.
	Name string `toml:"name"`
	// Every ticks at wall-clock multiples of the interval in Timezone,
	// whole seconds. One of Every and Cron is required.
	Every time.Duration `toml:"every"`
	// Cron is a cron expression: 5 fields, 6 with seconds first, @hourly…
	Cron string `toml:"cron"`
	// Timezone is an IANA zone name. Defaults to UTC.
	Timezone string `toml:"timezone"`
	// TimezoneFrom names the entity attribute (entities_format = "jsonl")
	// that holds each entity's IANA zone: the schedule is evaluated, for
	// each entity, in its own zone; an entity without the attribute uses
	// Timezone. Defaults to "" (every entity in Timezone).
	TimezoneFrom string `toml:"timezone_from"`
	// Spread spreads entity start times over this window, by a hash of the
	// entity. Defaults to 0s (off).
	Spread time.Duration `toml:"spread"`

	// At most one entity source; none makes a singleton task.
	Entities        []string `toml:"entities"`
	EntitiesFile    string   `toml:"entities_file"`
	EntitiesCommand []string `toml:"entities_command"`
	// EntitiesURL is an HTTP(S) endpoint answering a GET with the
	// entities, as JSON lines (as entities_format "jsonl") or one JSON
	// array. Its ETag is kept (a 304 reuses the list), and its last good
	// list stands in for it when it fails, for EntitiesMaxAge.
	EntitiesURL string `toml:"entities_url"`
	// EntitiesHeaders are entities_url's request headers, ${NAME} as in
	// Headers. Defaults to none.
	EntitiesHeaders map[string]string `toml:"entities_headers"`
	// EntitiesMaxAge is how long entities_url's last good list stands in
	// for an endpoint that fails. Defaults to 1h.
	EntitiesMaxAge time.Duration `toml:"entities_max_age"`
	// EntitiesTimeout stops an entities_command, and bounds an
	// entities_url's request, its body read whole. Defaults to 1m.
	EntitiesTimeout time.Duration `toml:"entities_timeout"`
	// EntitiesFormat is how entities_file and entities_command's output
	// give entities: "lines" (one id a line: the default) or "jsonl" (one
	// JSON object a line, {"id": "shop-42", "tz": "Europe/Berlin"}: its
	// other members are the entity's attributes, which its runs see).
	// entities_url's answer is JSON: "jsonl" is its default and only value.
	EntitiesFormat string `toml:"entities_format"`

	// Exactly one action.
	Command []string `toml:"command"`
	URL     string   `toml:"url"`
	Handler string   `toml:"handler"`
	// Headers are the HTTP action's request headers. ${NAME} in a value is
	// the environment variable NAME, read when the config is loaded (a
	// secret stays out of the file); an unset one is an error. Defaults to
	// none.
	Headers map[string]string `toml:"headers"`
	// FollowRedirects is which redirects the HTTP action follows: "none"
	// (the default: a 3xx answer fails the run) or "same-origin" (to the
	// url's scheme, host and port only; never the body and headers to
	// another host).
	FollowRedirects string `toml:"follow_redirects"`

	// Concurrency is how many runs of this task go on at once on this
	// replica. Defaults to 4.
	Concurrency int `toml:"concurrency"`
	// Shards is how many shards the task's lease state is kept in: its
	// entities are spread over them by a hash of their id, and a Redis
	// Cluster serves each from its master, so that one task of millions
	// of entities is not one master's work. 1..64; defaults to 1. The
	// count is recorded at the task's first run; a change takes effect
	// once `tickd migrate` reshards the task (while replicas run it).
	Shards int `toml:"shards"`
	// Limits names the [[limits]] the task's runs start under: a run starts
	// only when each of them has room, and waits (with its tick) until
	// then. Defaults to none.
	Limits []string `toml:"limits"`
	// Timeout stops a run that goes on longer. Defaults to 1h.
	Timeout time.Duration `toml:"timeout"`
	// WarnAfter logs one warning when a run is still going. Defaults to 0s
	// (off).
	WarnAfter time.Duration `toml:"warn_after"`
	// LeaseTTL is renewed every LeaseTTL/3 while a run goes on. Defaults to
	// 1m; at least driver.MinTTL.
	LeaseTTL time.Duration `toml:"lease_ttl"`
	// OnBusy defaults to skip.
	OnBusy OnBusy `toml:"on_busy"`
	// QueueMax is how many ticks on_busy = "queue" buffers per entity,
	// each run with its own tick, oldest first; past it the oldest is
	// dropped (recorded so). 1 (the default): one follow-up, carrying the
	// latest tick. A buffered tick older than CatchUp before the newest is
	// missed (recorded so); with CatchUp 0, none is.
	QueueMax int `toml:"queue_max"`
	// Priority is a head start in the lines of the task's limits: a run
	// waits as if it had asked this much earlier (inside its group, in a
	// fair limit). Defaults to 0s.
	Priority time.Duration `toml:"priority"`
	// PriorityFrom names an entity attribute that gives an entity's own
	// head start in place of Priority ("90s", "2m"; a value that is no
	// duration is none). Defaults to "".
	PriorityFrom string `toml:"priority_from"`
	// TriggerPriority is the head start of an operator's trigger (tickd
	// trigger, the console): ahead of the tick runs that waited less than
	// it. Defaults to 24h.
	TriggerPriority time.Duration `toml:"trigger_priority"`
	// RescheduleExitCode is the exec exit status that means "more work
	// left, run me again". Defaults to 75 (EX_TEMPFAIL).
	RescheduleExitCode int `toml:"reschedule_exit_code"`
	// RescheduleDelay is how soon a rescheduled run may start. Defaults to
	// 0s.
	RescheduleDelay time.Duration `toml:"reschedule_delay"`
	// MaxReschedules is how many consecutive reschedules run before the
	// next tick is waited for. Defaults to 100.
	MaxReschedules int `toml:"max_reschedules"`
	// Retries is how many times a failed run is retried, with backoff.
	// Defaults to 0.
	Retries int `toml:"retries"`
	// CatchUp runs the latest missed tick once, at start or after an
	// outage, if it is at most this old. Defaults to 0s (off).
	CatchUp time.Duration `toml:"catch_up"`
	// CatchUpRuns says which missed ticks CatchUp runs: "latest" (the
	// default: the latest, once), or "all": every tick within CatchUp that
	// no replica ran, the latest first, then the others oldest first, at
	// most CatchUpMax of them.
	CatchUpRuns string `toml:"catch_up_runs"`
	// CatchUpMax bounds the ticks catch_up_runs = "all" runs (1..10000,
	// default 100): the oldest past it stay missed.
	CatchUpMax int `toml:"catch_up_max"`
	// RunRecord keeps, for this long, the record of which entities ran
	// each tick (a bitmap: 1.25 KB a tick for 10,000 entities), so that a
	// backfill (tickd backfill) of its ticks runs only the entities that
	// did not run them (at most MaxRunRecord). Defaults to 0s: none,
	// but catch_up_runs = "all"'s (catch_up and an hour).
	RunRecord time.Duration `toml:"run_record"`
	// HeartbeatURL is an outside monitor's check (a Healthchecks.io ping
	// URL): URL/start when a tick's fan-out starts, URL or URL/fail when it
	// is complete, once per tick for the fleet. {task} is the task's name
	// (for [defaults] and a monitor's per-name URLs); ${NAME} is the
	// environment variable NAME, read at load. Defaults to "" (off).
	HeartbeatURL string `toml:"heartbeat_url"`

	// The history (docs/operations.md, "History").
	// HistoryTicks is how many tick records are kept. Defaults to 672 (a
	// week of 15-minute ticks).
	HistoryTicks int `toml:"history_ticks"`
	// HistoryAge drops tick records older than this. Defaults to 168h.
	HistoryAge time.Duration `toml:"history_age"`
	// FailuresKept is how many failed runs are kept, with their errors.
	// Defaults to 50.
	FailuresKept int `toml:"failures_kept"`
	// FailureOutput is how many bytes of a failed run's output (its end) are
	// kept. Defaults to 4096.
	FailureOutput int `toml:"failure_output"`
	// FlagAfter is how many ticks in a row must fail, or run nothing, for
	// the task to be flagged failing or starved. Defaults to 3.
	FlagAfter int `toml:"flag_after"`

	// Derived by validation.
	Location *time.Location    `toml:"-"`
	Schedule schedule.Schedule `toml:"-"`
}

// DefaultTask is every per-task key's built-in default. [defaults]
// overrides it, and a task's own keys override [defaults].
func DefaultTask() Task {
	return Task{
		Timezone:           "UTC",
		EntitiesTimeout:    time.Minute,
		EntitiesMaxAge:     time.Hour,
		Concurrency:        4,
		Shards:             1,
		Timeout:            time.Hour,
		LeaseTTL:           time.Minute,
		OnBusy:             OnBusySkip,
		QueueMax:           1,
		CatchUpRuns:        CatchUpLatest,
		CatchUpMax:         100,
		TriggerPriority:    24 * time.Hour,
		RescheduleExitCode: 75,
		MaxReschedules:     100,
		HistoryTicks:       driver.DefaultHistory().Ticks,
		HistoryAge:         driver.DefaultHistory().Age,
		FailuresKept:       driver.DefaultHistory().Failures,
		FailureOutput:      4096,
		FlagAfter:          3,
	}
}

// LateLimit is how late a tick may still start its runs: the catch-up
// window, and at least 10s (a timer woken late, a Redis that answered late).
func (t *Task) LateLimit() time.Duration { return max(t.CatchUp, 10*time.Second) }

// singleton reports whether the task has no entity source: it runs for one
// implicit entity, its own name.
func (t *Task) singleton() bool {
	return t.Entities == nil && t.EntitiesFile == "" && t.EntitiesCommand == nil && t.EntitiesURL == ""
}

// MissingAfter is how long after a tick its record may still be missing
// without the task being taken for not firing (or the tick for missed):
// the tick may start as late as its catch-up window, and its first write
// is batched.
func (t *Task) MissingAfter() time.Duration { return t.LateLimit() + time.Minute }
