// Package redisdriver keeps a lease store's state in Redis: the driver
// (lease/driver) for lease.New(redisdriver.New(client, prefix, acks), opts),
// for replicas that share one Redis
// (plain, Sentinel, a managed endpoint, or Cluster).
//
// What lives here: the key layout (keys.go: every task's keys in one
// bucket, a hash slot, of 64), the stored formats (format.go) and the Lua
// scripts (lua/*.lua, embedded) that are each operation, one script call
// per task and batch; the wait for replicas' acknowledgements (acks.go);
// the layout check, its migration and the data-loss epochs (layout.go).
// lease/doc.go explains the protocol these serve and draws the layout.
//
// What does not: the lease protocol (trust windows, renewals, releases:
// package lease), and the in-process driver (lease/memdriver), the Go twin
// of every script here.
package redisdriver
