package tasks

import "errors"

// Causes of a run's cancellation that the scheduler gives, besides the
// lease's own (lease.ErrLost, lease.ErrUntrusted, lease.ErrRevoked):
// context.Cause(ctx) of a handler's ctx is one of them once it is done.
var (
	// ErrTimeout: the run took longer than its task's timeout.
	ErrTimeout = errors.New("tickd: run timed out")
	// ErrShutdown: the process is stopping; the run's entity is handed
	// over to another replica.
	ErrShutdown = errors.New("tickd: shutting down")
)
