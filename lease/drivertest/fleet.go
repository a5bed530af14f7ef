package drivertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// testAnnounced: a replica's announcement lists it among the live ones
// with its tasks, says which tasks a live replica runs (Known), and is gone
// once withdrawn; the backend answers a ping.
func testAnnounced(t *testing.T, k stores) {
	a := k(lease.Options{Replica: "A", Version: "v1"})
	if err := a.Fleet().Ping(bg); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := a.Fleet().Announce(bg, []string{"t", "a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	rs, err := a.Fleet().Replicas(bg)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rs, func(r driver.Replica) bool { return r.ID == "A" })
	if i < 0 {
		t.Fatalf("the announced replica is not among the live ones: %+v", rs)
	}
	slices.Sort(rs[i].Tasks)
	expect.Equal(t, "its tasks", fmt.Sprint(rs[i].Tasks), "[a t]")
	expect.Equal(t, "its version", rs[i].Version, "v1")
	expect.True(t, "its last announcement is recent", time.Since(rs[i].Seen) < time.Minute && !rs[i].Seen.IsZero())
	for task, want := range map[string]bool{"t": true, "a": true, "none": false} {
		got, err := a.Fleet().Known(bg, task)
		if err != nil || got != want {
			t.Fatalf("Known(%q) = %v, %v; want %v", task, got, err, want)
		}
	}
	if err := a.Fleet().Withdraw(bg); err != nil {
		t.Fatal(err)
	}
	rs, err = a.Fleet().Replicas(bg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(rs, func(r driver.Replica) bool { return r.ID == "A" }) {
		t.Fatalf("a withdrawn replica is still live: %+v", rs)
	}
	if got, err := a.Fleet().Known(bg, "t"); err != nil || got {
		t.Fatalf("Known after the withdrawal: %v, %v; want false", got, err)
	}
}

// testDueCount: the count of pending runs counts every task's.
func testDueCount(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	for i, task := range []string{"t", "t", "a"} {
		d := driver.Due{Task: task, Entity: fmt.Sprint("e", i), Reason: driver.ReasonTrigger}
		if err := s.Enqueue(bg, d, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Fleet().DueCount(bg)
	if err != nil || n != 3 {
		t.Fatalf("DueCount = %d, %v; want 3", n, err)
	}
}

// testTaken: a fan-out asks, for each chunk of a tick, whether one took it
// already; a chunk never sent is not taken, and a driver that takes chunks
// says so of one a batch sent.
func testTaken(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	tick := time.Now().Truncate(time.Second)
	var reqs []driver.Request
	for _, id := range []string{"c1", "c2"} {
		reqs = append(reqs, driver.Request{Task: "t", Entity: id, TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick, Chunk: "sent"})
	}
	for _, r := range s.AcquireBatch(bg, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		mustRelease(t, r.Lease)
	}
	n, err := s.Shards(bg, "t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got, err := s.Taken(bg, driver.ShardName("t", i), tick, []string{"never-sent", "sent"})
		if err != nil || len(got) != 2 {
			t.Fatalf("Taken = %v, %v; want an answer per chunk", got, err)
		}
		expect.True(t, "a chunk never sent is not taken", !got[0])
	}
}

// testAdmin: a driver that keeps its state on a server (driver.Admin) says
// its layout is this tickd's, probes its replicas, migrates nothing on a
// new backend, and reshards a task with every entity's state moved: each
// is granted again afterwards, at a higher fence.
func testAdmin(t *testing.T, k stores) {
	s := k(lease.Options{Replica: "A"})
	if _, ok := s.Driver().(driver.Admin); !ok {
		return // in-process: nothing of this
	}
	if err := s.Fleet().CheckLayout(bg); err != nil {
		t.Fatalf("a new backend's layout: %v", err)
	}
	r, err := s.Fleet().Replication(bg)
	if err != nil || r.Role == "" {
		t.Fatalf("replication: %+v, %v", r, err)
	}
	if m, err := s.Fleet().Migrate(bg); err != nil || m != (driver.Migrated{}) {
		t.Fatalf("migrate on a new backend: %+v, %v; want nothing moved", m, err)
	}
	fences := map[string]int64{}
	for i := range 8 {
		l := mustAcquire(t, s, req(fmt.Sprint("e", i), time.Minute))
		fences[l.Entity] = l.Fence
		mustRelease(t, l)
	}
	rs, err := s.Fleet().Reshard(bg, "t", 3)
	if err != nil || rs.To != 3 {
		t.Fatalf("reshard: %+v, %v", rs, err)
	}
	for e, f := range fences {
		l := mustAcquire(t, s, req(e, time.Minute))
		expect.True(t, fmt.Sprintf("%s's fence after the reshard: %d after %d", e, l.Fence, f), l.Fence > f)
		mustRelease(t, l)
	}
	if n, err := s.Shards(bg, "t"); err != nil || n != 3 {
		t.Fatalf("shards after the reshard: %d, %v", n, err)
	}
}
