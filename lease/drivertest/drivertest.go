// Package drivertest is the conformance suite of lease drivers: every
// promise tickd's lease store keeps that rests on its driver (exclusion,
// busy answers, expiry, unlock, fences, once per tick, the due queue and
// its requests, status, the history, pauses, the task registry, limits),
// as cases any driver runs. tickd runs it on the Redis driver (single,
// replicated, Cluster) and the in-process one, whose tests are this suite
// alone (lease/memdriver's TestConformance); a third driver (PostgreSQL,
// say) starts from it the same way: it hands the suite drivers, and the
// suite runs tickd's store over them. Every method of driver.Driver (and
// of driver.Admin, for a driver that offers it) is called by some case: a
// run of every case fails for one none called.
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) drivertest.Kit {
//			db := newDatabase(t) // a fresh schema per case
//			return func() driver.Driver { return pgdriver.New(db) }
//		})
//	}
//
// Compare runs one random sequence of operations against stores on two
// drivers and fails where they answer differently: tickd holds its
// in-process driver to its Redis one with it (TestDriversAgree).
package drivertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/lease/driver"
)

// Kit makes drivers over the state under test. For a shared backend
// (Redis), each call is another replica's driver, on a client of its own;
// for an in-process driver, the same driver each time (one store runs on
// it). The suite runs a store over each driver it gets, and stops it when
// its case ends; the Kit closes what it opened (t.Cleanup).
type Kit func() driver.Driver

// Run runs every case, each in a subtest of its own name on a Kit newKit
// makes for it (a key prefix of its own, say).
func Run(t *testing.T, newKit func(t *testing.T) Kit) { RunSharded(t, 1, newKit) }

// RunSharded runs every case as Run does, with each task the cases use
// kept in n shards: every case then holds for a task whose entities are
// spread over shards, as for one in one.
//
// Each driver's calls are recorded: when every case ran (no -run that
// leaves some out), a method of driver.Driver that no case called, or of
// driver.Admin for a driver that offers it, fails the run.
func RunSharded(t *testing.T, n int, newKit func(t *testing.T) Kit) {
	c := &calls{}
	ran := 0
	for _, cs := range cases { // none is parallel: each ends before the next
		t.Run(cs.name, func(t *testing.T) {
			ran++
			cs.fn(t, storesOn(t, newKit(t), n, c))
		})
	}
	if ran == len(cases) {
		c.check(t)
	}
}

// stores makes a store over a driver of the Kit, for a replica of opts:
// a store of its own over each driver, the same one again for a driver
// already given.
type stores func(opts lease.Options) *lease.Store

// storesOn runs stores over k's drivers, each task in n shards. A driver
// with the operator's tools (driver.Admin) is told at the case's first
// store that its backend holds no lease yet (InitEpoch): no data-loss
// quarantine on a new backend.
func storesOn(t *testing.T, k Kit, n int, c *calls) stores {
	var mu sync.Mutex
	made := map[driver.Driver]*lease.Store{}
	return func(opts lease.Options) *lease.Store {
		d := k()
		mu.Lock()
		defer mu.Unlock()
		if s, ok := made[d]; ok {
			return s
		}
		rd := recorded(d, c)
		s := lease.New(rd, opts)
		t.Cleanup(func() { s.Stop(context.Background()) })
		if a, ok := rd.(driver.Admin); ok && len(made) == 0 {
			if err := a.InitEpoch(context.Background()); err != nil {
				t.Fatalf("InitEpoch: %v", err)
			}
		}
		made[d] = s
		for _, task := range taskNames {
			s.WantShards(task, n)
		}
		return s
	}
}

// taskNames are the tasks the cases use.
var taskNames = []string{"t", "a", "b", "u", "p", "none", "other", "sync", "we:ird {task}", "x y{1}:%|#\n"}

var cases = []struct {
	name string
	fn   func(t *testing.T, k stores)
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
	{"FloorCountsAnEarlierTick", testFloor},
	{"FollowUp", testFollowUp},
	{"FollowUpCarriesItsTick", testFollowUpTick},
	{"QueueBuffersTicks", testQueueBuffersTicks},
	{"CatchUpRunsOnce", testCatchUpRunsOnce},
	{"RecordOfItsOwn", testRecordOfItsOwn},
	{"MarkFailed", testMarkFailed},
	{"Backfills", testBackfills},
	{"ReplaceRevokesTheHolder", testReplace},
	{"ReplaceOutlivesAFrozenHolder", testReplaceFrozenHolder},
	{"ReplaceKeepsTriggers", testReplaceKeepsTriggers},
	{"ReleaseWithNext", testReleaseNext},
	{"ChainKeepsItsTick", testChainTick},
	{"DueTakenOnce", testDueTakenOnce},
	{"DueVisibilityTimeout", testVisibility},
	{"BusyDueEntryBecomesFollowUp", testBusyDue},
	{"RequestsAnsweredByTheirRuns", testRequests},
	{"Batch", testBatch},
	{"BatchAroundAHeldEntity", testBatchAroundAHeldEntity},
	{"UnlockInsideABatch", testUnlockInsideABatch},
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
	{"ClaimOnceBetweenReplicas", testClaim},
	{"LimitConcurrency", testLimitConcurrency},
	{"LimitPerProcess", testLimitPerProcess},
	{"LimitGivesBack", testLimitGivesBack},
	{"LimitRate", testLimitRate},
	{"LimitClosed", testLimitClosed},
	{"LimitPerEntity", testLimitPerEntity},
	{"LimitedTickYields", testLimitedTickYields},
	{"LimitServesInOrder", testLimitServesInOrder},
	{"LimitFairByGroup", testLimitFairByGroup},
	{"LimitHeadStart", testLimitHeadStart},
	{"LimitOlderTicksBehind", testLimitOlderTicksBehind},
	{"LimitFairKeepsGroup", testLimitFairKeepsGroup},
	{"LimitAutoRate", testLimitAutoRate},
	{"LimitAutoBurstsAfterPauses", testLimitAutoBurstsAfterPauses},
	{"NewerTickSupersedes", testNewerTickSupersedes},
	{"Announced", testAnnounced},
	{"DueCount", testDueCount},
	{"Taken", testTaken},
	{"Admin", testAdmin},
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
