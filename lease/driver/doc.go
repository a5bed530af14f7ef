// Package driver is what a lease store is built on: the contract between
// the lease protocol and its storage backends (requests, due entries, tick
// records, pages of entities) and the key-safe encoding of task and entity
// ids.
//
// Package lease keeps the protocol: leases, their trust windows, the
// keeper that renews them, releases, fencing tokens and the errors. A
// driver keeps the state: the Redis driver in Lua scripts over a key layout
// of its own, the in-process driver in maps. The caller builds the driver
// and hands it to lease.New: lease imports this package and no driver. The
// words the contract shares with the stable packages (Reason, Outcome,
// Finished, Next, Held, Unlocked, Clock, ReplicaAcks) are declared in
// package tickdtype; the names here are aliases of them. A driver on a
// server may also offer Admin, the operator's tools. Driver is not yet
// stable (see docs/releasing.md).
//
// What does not live here: the Redis key layout and scripts, the
// protocol's rules, history's JSON values (failures, actions), which the
// store encodes and a driver stores as it gets them.
package driver
