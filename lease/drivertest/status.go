package drivertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

func testEntityState(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	st, err := s.Fleet().Entity(bg, "t", "e")
	if err != nil {
		t.Fatal(err)
	}
	expect.Equal(t, "unknown entity: held", st.Held, nil)
	expect.Equal(t, "unknown entity: last run", st.Last, nil)
	expect.Equal(t, "unknown entity: pending", st.Pending, nil)
	l := mustAcquire(t, s, req("e", time.Minute))
	st, _ = s.Fleet().Entity(bg, "t", "e")
	expect.NotNil(t, "held lease", st.Held)
	expect.Equal(t, "held lease's fence", st.Held.Fence, l.Fence)
	expect.Equal(t, "held lease's holder", st.Held.Holder, "A")
	if _, err := l.Release(bg, driver.Finished{Outcome: driver.OutcomeDone}, &driver.Next{Reason: driver.ReasonReschedule, Delay: time.Hour, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Fleet().Entity(bg, "t", "e")
	expect.Equal(t, "held after release", st.Held, nil)
	expect.NotNil(t, "last run after release", st.Last)
	expect.Equal(t, "last run's outcome", st.Last.Outcome, driver.OutcomeDone)
	expect.Equal(t, "last run's fence", st.Last.Fence, l.Fence)
	expect.NotNil(t, "pending after a release with driver.Next", st.Pending)
	expect.Equal(t, "pending reason", st.Pending.Reason, driver.ReasonReschedule)
	expect.Equal(t, "pending attempt", st.Pending.Attempt, 1)
}
func testStatus(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	l := mustAcquire(t, s, req("held", time.Minute))
	done := mustAcquire(t, s, driver.Request{Task: "other", Entity: "x", TTL: time.Minute, Reason: driver.ReasonTrigger})
	if _, err := done.Release(bg, driver.Finished{Outcome: "failed", Started: time.UnixMilli(1000), Ended: time.UnixMilli(3000)}, nil); err != nil {
		t.Fatal(err)
	}
	var hs []driver.Held
	s.Fleet().Leases(bg, "t", func(h driver.Held) error { hs = append(hs, h); return nil }) //nolint:errcheck
	if len(hs) != 1 || hs[0].Entity != "held" || hs[0].Fence != l.Fence || hs[0].TTL <= 0 || hs[0].TTL > time.Minute {
		t.Fatalf("leases of t: %+v", hs)
	}
	var rs []driver.LastRun
	s.Fleet().LastRuns(bg, "other", func(r driver.LastRun) error { rs = append(rs, r); return nil }) //nolint:errcheck
	if len(rs) != 1 || rs[0].Outcome != "failed" || rs[0].Fence != done.Fence || rs[0].Ended.Sub(rs[0].Started) != 2*time.Second {
		t.Fatalf("last runs: %+v", rs)
	}
	var all []driver.Held
	s.Fleet().Leases(bg, "", func(h driver.Held) error { all = append(all, h); return nil }) //nolint:errcheck
	if len(all) != 1 {
		t.Fatalf("all leases: %+v", all)
	}
	mustRelease(t, l)
}

// testEntityPage: a task's entities come a page at a time, each once, and
// a search keeps the ids that begin with (or contain) its text, hostile
// ids included.
func testEntityPage(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	want := map[string]bool{}
	for i := range 25 {
		id := fmt.Sprintf("user-%02d", i)
		if i == 7 {
			id = "user-07 " + hostile
		}
		l := mustAcquire(t, s, driver.Request{Task: "p", Entity: id, TTL: time.Minute, Reason: driver.ReasonTrigger})
		if i%2 == 0 {
			mustRelease(t, l)
		}
		want[id] = true
	}
	mustAcquire(t, s, driver.Request{Task: "other", Entity: "user-99", TTL: time.Minute, Reason: driver.ReasonTrigger})
	got := map[string]bool{}
	held := 0
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 25 {
			t.Fatal("the walk does not end")
		}
		p, err := s.Fleet().EntityPage(bg, "p", driver.PageQuery{Cursor: cursor, Size: 10, MaxScan: 1000})
		if err != nil {
			t.Fatal(err)
		}
		expect.True(t, "at most a page", len(p.Rows) <= 10)
		for _, r := range p.Rows {
			expect.True(t, "each entity once: "+r.Entity, !got[r.Entity])
			got[r.Entity] = true
			if r.Held != nil {
				held++
			}
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	expect.Equal(t, "entities walked", len(got), 25)
	expect.Equal(t, "held", held, 12)
	p, err := s.Fleet().EntityPage(bg, "p", driver.PageQuery{Search: "user-1", Size: 100, MaxScan: 1000})
	expect.True(t, "prefix search", err == nil && len(p.Rows) == 10)
	p, err = s.Fleet().EntityPage(bg, "p", driver.PageQuery{Search: "#c d%", Substring: true, Size: 100, MaxScan: 1000})
	expect.True(t, "substring search finds the hostile id", err == nil && len(p.Rows) == 1 && p.Rows[0].Entity == "user-07 "+hostile)
}

// testTaskRegistry: tasks registered are remembered with their schedule,
// zone, when and by whom, until forgotten; a second registration updates
// them; hostile names stay whole.
func testTaskRegistry(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	hostile := "x y{1}:%|#\n"
	if err := s.Fleet().RegisterTasks(bg, []driver.TaskInfo{{Name: "sync", Schedule: "every 15m0s", Timezone: "Europe/Berlin"}, {Name: hostile, Schedule: `cron "* * * * *"`, Timezone: "UTC"}}); err != nil {
		t.Fatal(err)
	}
	reg, err := s.Fleet().Registry(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reg) != 2 || reg[0].Name != "sync" || reg[1].Name != hostile {
		t.Fatalf("registry %+v", reg)
	}
	expect.Equal(t, "schedule as written", reg[0].Schedule, "every 15m0s")
	expect.Equal(t, "zone", reg[0].Timezone, "Europe/Berlin")
	expect.Equal(t, "registered by", reg[0].By, "A")
	expect.True(t, "registered now", time.Since(reg[0].Seen) < time.Minute)
	ok, err := s.Fleet().ForgetTask(bg, "sync")
	expect.Equal(t, "forget's error", err, nil)
	expect.Equal(t, "forget found it", ok, true)
	if ok, _ := s.Fleet().ForgetTask(bg, "sync"); ok {
		t.Fatal("forgot sync twice")
	}
	if reg, _ := s.Fleet().Registry(bg); len(reg) != 1 || reg[0].Name != hostile {
		t.Fatalf("after forget: %+v", reg)
	}
}

// testClaim: a name is claimed once within its ttl, between replicas and
// by one replica asking again; another name, a hostile one too, is its
// own; once the ttl has passed, it may be claimed again.
func testClaim(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A"})
	b := k(lease.Options{Replica: "B"})
	claim := func(s *lease.Store, name string, ttl time.Duration) bool {
		t.Helper()
		ok, err := s.Fleet().Claim(bg, name, ttl)
		expect.Equal(t, "claim's error", err, nil)
		return ok
	}
	hostile := "x y{1}:%|#\n"
	expect.True(t, "the first claim is granted", claim(a, "ping:t:1", time.Second))
	expect.True(t, "not to another replica", !claim(b, "ping:t:1", time.Minute))
	expect.True(t, "not to itself again", !claim(a, "ping:t:1", time.Minute))
	expect.True(t, "another name is its own", claim(b, "ping:t:2", time.Minute))
	expect.True(t, "a hostile name too", claim(b, hostile, time.Minute) && !claim(a, hostile, time.Minute))
	expect.WaitFor(t, 5*time.Second, "the claim free once its ttl passed", func() bool { return claim(b, "ping:t:1", time.Minute) })
	expect.True(t, "claimed again, held again", !claim(a, "ping:t:1", time.Minute))
}
