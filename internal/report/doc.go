// Package report reads what the operator commands and the console show —
// a task's status, its history — and holds the JSON documents they print
// or serve: one schema for `tickd status -json`, `tickd history -json` and
// the console's JSON endpoints (docs/operations.md, "Commands").
package report
