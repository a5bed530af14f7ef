package history

// The reasons a tick skips an entity, in a tick part's Skipped, beside
// lease/driver's SkipAlreadyRan and SkipLimited: the scheduler writes
// them, the history and the documents read them.
const (
	SkipBusy = "busy"
	// SkipReplacing: the entity was busy and its holder was revoked
	// (on_busy = "replace"): the tick's run starts once the holder ends,
	// with reason replaced.
	SkipReplacing = "replacing"
	// SkipDropped: the entity was busy and its tick buffered (on_busy =
	// "queue", queue_max), then taken out of the buffer as its oldest when
	// queue_max newer ticks were buffered: it never runs.
	SkipDropped = "dropped"
	// SkipMissed: as SkipDropped, taken out because it was older than
	// catch_up when a newer tick was buffered.
	SkipMissed          = "missed"
	SkipQuarantined     = "quarantined"
	SkipNotAcknowledged = "not_acknowledged"
	SkipError           = "error"   // the store failed until the tick was too late
	SkipStopped         = "stopped" // shutdown stopped the fan-out first
	SkipPaused          = "paused"  // tickd pause stopped the fan-out first
	SkipRemoved         = "removed" // a reload took the task out of the config first
	// SkipSuperseded: a run that waited for a limit gave its place to the
	// entity's run of a newer tick (an entity has one waiting run), or to
	// another run of it (a retry); or the fan-out came to the entity once a
	// newer tick of it had run (a replica on a newer schedule, a late
	// fan-out).
	SkipSuperseded = "superseded"
	// SkipUnknownZone: the entity's zone attribute (timezone_from) names
	// no IANA zone; it is counted at the ticks of the task's own zone.
	SkipUnknownZone = "unknown_zone"
)
