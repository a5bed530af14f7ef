package lease

import "github.com/tickd/tickd/lease/memdriver"

// NewMemory returns a Store whose leases live in this process: the embedded
// default for one replica without Redis. Its semantics are those of the
// Redis store (the same conformance suite runs against both), except that
// there is no data loss to detect and nothing is shared between processes.
func NewMemory(opts Options) *Store { return New(memdriver.New(), opts) }
