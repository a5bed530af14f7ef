// Package memdriver keeps a lease store's state in this process: the
// driver (lease/driver) for lease.New(memdriver.New(), opts), tickd's embedded default
// for one replica without Redis.
//
// Each method is a Go twin of the Redis driver's Lua script for the same
// operation, under one mutex; the conformance suite and a randomized
// differential test (lease's TestDriversAgree) hold the two to the same
// answers. What does not live here: the lease protocol (trust windows,
// renewals, releases: package lease) and anything shared between
// processes.
package memdriver
