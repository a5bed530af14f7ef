// Package faults holds tickd's multi-replica fault-injection suite (in its
// tests): real tickd processes on a real redis-server, real faults (kill -9,
// rolling SIGTERM, Redis stopped, Redis restarted empty, a stalled
// connection through a TCP proxy, a skewed clock, SIGSTOP), and a checker
// that turns each guarantee (docs/guarantees.md) into a figure. See faults_test.go.
package faults
