// Package drivertest is the conformance suite of lease drivers: every
// promise a lease.Store keeps that rests on its driver (exclusion, busy
// answers, expiry, unlock, fences, once per tick, the due queue and its
// requests, status, the history, pauses, the task registry), as cases any
// driver runs. tickd runs it on the Redis driver (single, replicated,
// Cluster) and the in-process one; a third driver (PostgreSQL, say) starts
// from it:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) drivertest.Kit {
//			db := newDatabase(t) // a fresh schema per case
//			return func(opts lease.Options) *lease.Store {
//				s := lease.New(pgdriver.New(db), opts)
//				t.Cleanup(func() { s.Close() })
//				return s
//			}
//		})
//	}
//
// What does not live here: the protocol's own cases (how a Store trusts,
// renews and closes over its leases), which need its insides and run in
// package lease, and the randomized differential test of the two drivers
// (lease's TestDriversAgree).
package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/tickd/tickd/lease"
	"github.com/tickd/tickd/lease/driver"
)

// Kit makes Stores over the driver under test that share its state: for a
// shared backend (Redis), each call is another replica's Store, on a
// client of its own; for an in-process driver, the same Store each time.
// The Kit closes what it makes when its test ends.
type Kit func(opts lease.Options) *lease.Store

// Run runs every case, each in a subtest of its own name on a Kit newKit
// makes for it (a key prefix of its own, say).
func Run(t *testing.T, newKit func(t *testing.T) Kit) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newKit(t)) })
	}
}

// Sharded makes k's stores keep each task the cases use in n shards
// (lease.Store.WantShards): every case then holds for a task whose
// entities are spread over shards, as for one in one.
func Sharded(k Kit, n int) Kit {
	return func(opts lease.Options) *lease.Store {
		s := k(opts)
		for _, task := range taskNames {
			s.WantShards(task, n)
		}
		return s
	}
}

// taskNames are the tasks the cases use.
var taskNames = []string{"t", "a", "b", "u", "p", "none", "other", "sync", "we:ird {task}", "x y{1}:%|#\n"}

// Cases names the cases Run runs, in order.
func Cases() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}

var cases = []struct {
	name string
	fn   func(t *testing.T, k Kit)
}{
	{"ExclusionUnderContention", testExclusion},
	{"BusySaysWho", testBusy},
	{"CheckDoesNotWaitForTheTimer", testCheck},
	{"RenewalKeepsLease", testRenewal},
	{"CloseReportsLeasesStillHeld", testCloseReportsHeld},
	{"UnlockRevokes", testUnlock},
	{"UnlockTellsItsOwnHolderAtOnce", testUnlockOwnLease},
	{"UnlockRevokedLeaseExpires", testUnlockExpires},
	{"ForceUnlockFrees", testForceUnlock},
	{"DuplicateInOneBatch", testDuplicateInBatch},
	{"Retention", testRetention},
	{"OncePerTick", testOncePerTick},
	{"FollowUp", testFollowUp},
	{"FollowUpCarriesItsTick", testFollowUpTick},
	{"ReleaseWithNext", testReleaseNext},
	{"ChainKeepsItsTick", testChainTick},
	{"DueTakenOnce", testDueTakenOnce},
	{"DueVisibilityTimeout", testVisibility},
	{"BusyDueEntryBecomesFollowUp", testBusyDue},
	{"RequestsAnsweredByTheirRuns", testRequests},
	{"Batch", testBatch},
	{"EarlyTickRefused", testEarly},
	{"HostileIDs", testHostileIDs},
	{"Status", testStatus},
	{"EntityState", testEntityState},
	{"TickRecords", testTickRecords},
	{"HistoryRetention", testHistoryRetention},
	{"FailuresAndActions", testFailuresAndActions},
	{"Histories", testHistories},
	{"Pauses", testPauses},
	{"EntityPage", testEntityPage},
	{"TaskRegistry", testTaskRegistry},
	{"LimitConcurrency", testLimitConcurrency},
	{"LimitPerProcess", testLimitPerProcess},
	{"LimitGivesBack", testLimitGivesBack},
	{"LimitRate", testLimitRate},
	{"LimitClosed", testLimitClosed},
	{"LimitPerEntity", testLimitPerEntity},
	{"LimitedTickYields", testLimitedTickYields},
	{"LimitServesInOrder", testLimitServesInOrder},
	{"NewerTickSupersedes", testNewerTickSupersedes},
}

var bg = context.Background()

func req(entity string, ttl time.Duration) driver.Request {
	return driver.Request{Task: "t", Entity: entity, TTL: ttl, Reason: driver.ReasonTrigger}
}

func mustAcquire(t *testing.T, s *lease.Store, r driver.Request) *lease.Lease {
	t.Helper()
	l, err := s.Acquire(bg, r)
	if err != nil {
		t.Fatalf("acquire %s: %v", r.Entity, err)
	}
	return l
}

func mustRelease(t *testing.T, l *lease.Lease) lease.Released {
	t.Helper()
	r, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone, Started: l.Acquired, Ended: time.Now()}, nil)
	if err != nil {
		t.Fatalf("release %s: %v", l.Entity, err)
	}
	return r
}

// waitCause waits until the lease's context is cancelled and returns the cause.
func waitCause(t *testing.T, l *lease.Lease, d time.Duration) error {
	t.Helper()
	select {
	case <-l.Context().Done():
		return context.Cause(l.Context())
	case <-time.After(d):
		t.Fatalf("lease %s not cancelled within %v", l.Entity, d)
		return nil
	}
}
