// Package workerlog is the record format the test worker writes and the
// test harness reads.
package workerlog

// Record is one line of the worker's log: a run's start or end.
type Record struct {
	Event  string `json:"event"` // start | end | write (through the fence guards, as it goes)
	Task   string `json:"task"`
	Entity string `json:"entity"`
	Tick   string `json:"tick"`
	Fence  int64  `json:"fence"`
	Reason string `json:"reason"`
	Pid    int    `json:"pid"`
	Ppid   int    `json:"ppid"` // the tickd process that started it
	At     int64  `json:"at"`   // unix nanoseconds
	Exit   int    `json:"exit,omitempty"`
	Signal string `json:"signal,omitempty"`
	// Traceparent is the run's TRACEPARENT, when tickd traces.
	Traceparent string `json:"traceparent,omitempty"`
	// Guards is what each fence guard did with the write the run made at
	// this event, when it wrote through them (TESTWORKER_SINK): by guard
	// (postgres, redis, http), "accepted", "refused" or an error.
	Guards map[string]string `json:"guards,omitempty"`
	// GuardAt is when that write began (unix nanoseconds).
	GuardAt int64 `json:"guard_at,omitempty"`
}
