package drivertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/lease/driver"
)

// serveLine asks, round after round, for every run of reqs still waiting
// under lim (concurrency 1), all in one batch and the last in line first,
// until each ran once: one is granted a round, released at once. It
// returns the entities in the order they ran.
func serveLine(t *testing.T, s *lease.Store, lim driver.Limit, reqs []driver.Request) []string {
	t.Helper()
	left := slices.Clone(reqs)
	slices.Reverse(left)
	var order []string
	free := func() {
		expect.WaitFor(t, 10*time.Second, "the limit's place free", func() bool {
			st, err := s.Fleet().LimitStatus(bg, lim)
			return err == nil && st.Runs == 0
		})
	}
	for free(); len(left) > 0; free() {
		res := s.AcquireBatch(bg, left)
		granted := -1
		for i, r := range res {
			switch {
			case r.Err == nil:
				if granted >= 0 {
					t.Fatalf("two runs granted under a limit of 1: %s and %s", left[granted].Entity, left[i].Entity)
				}
				granted = i
				mustRelease(t, r.Lease)
			case !strings.Contains(r.Err.Error(), "no room"):
				t.Fatalf("%s: %v", left[i].Entity, r.Err)
			}
		}
		if granted < 0 {
			t.Fatalf("no run granted with the limit free; waiting: %d", len(left))
		}
		order = append(order, left[granted].Entity)
		left = slices.Delete(left, granted, granted+1)
	}
	return order
}

// fairAsk is a run of entity in group g (weight w) under limit "fair".
func fairAsk(entity, g string, w int, since time.Time) driver.Request {
	return driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"fair"},
		Since: since, Group: g, Weight: w, Grouped: true}
}

// testLimitFairByGroup: a fair limit's line is served by group, each group
// with runs waiting in turn, whatever its number of runs and however
// younger they are, the oldest first inside a group; a group of weight 2
// starts twice as often as one of weight 1. A run that asks again without
// its group keeps the one it has. Served oldest first, as a limit that is
// not fair, the small groups' runs wait behind the whole big group.
func testLimitFairByGroup(t *testing.T, k stores) {
	lim := driver.Limit{Name: "fair", Concurrency: 1, Burst: 1, Fair: true}
	a, _ := limitStores(k, lim)
	T := time.Now().Add(-time.Hour)
	var reqs []driver.Request
	for i := range 12 {
		reqs = append(reqs, fairAsk(fmt.Sprintf("big-%02d", i), "big", 1, T.Add(time.Duration(i)*time.Second)))
	}
	for _, g := range []string{"s1", "s2"} {
		for i := range 2 {
			reqs = append(reqs, fairAsk(fmt.Sprintf("%s-%d", g, i), g, 1, T.Add(time.Minute+time.Duration(i)*time.Second)))
		}
	}
	// Every run takes its place while the limit is full; the last small
	// one asks again not knowing its group: it keeps it.
	held := mustAcquire(t, a, fairAsk("holder", "big", 1, T.Add(-time.Hour)))
	for _, r := range a.AcquireBatch(bg, reqs) {
		if r.Err == nil {
			t.Fatal("a run granted under a full limit")
		}
	}
	st, err := a.Fleet().LimitStatus(bg, lim)
	noErr(t, err)
	expect.Equal(t, "groups waiting", st.GroupsWaiting, 3)
	if len(st.Groups) != 3 || st.Groups[0].Name != "big" || st.Groups[0].Waiting != 12 || st.Groups[1].Waiting != 2 || st.Groups[0].Oldest.Sub(T).Abs() > time.Millisecond {
		t.Fatalf("the groups, longest waiting first: %+v", st.Groups)
	}
	mustRelease(t, held)
	again := reqs[len(reqs)-1]
	again.Group, again.Grouped = "", false
	order := serveLine(t, a, lim, append(reqs[:len(reqs)-1:len(reqs)-1], again))
	t.Logf("served: %v", order)
	want := []string{"big-00", "s1-0", "s2-0", "big-01", "s1-1", "s2-1", "big-02"}
	expect.Equal(t, "the first starts, a group's turn each", strings.Join(order[:len(want)], " "), strings.Join(want, " "))
	expect.True(t, "the big group, oldest first", slices.IsSorted(slices.DeleteFunc(slices.Clone(order), func(e string) bool { return !strings.HasPrefix(e, "big") })))
	// Every start of the last minute is counted, by group: the holder's
	// (in big) and the 16.
	held = mustAcquire(t, a, fairAsk("holder", "big", 1, T.Add(-time.Hour)))
	late := fairAsk("late", "s1", 1, T)
	for _, r := range a.AcquireBatch(bg, []driver.Request{late}) {
		expect.True(t, "refused under a full limit", r.Err != nil)
	}
	st, err = a.Fleet().LimitStatus(bg, lim)
	noErr(t, err)
	expect.Equal(t, "starts in the last minute", st.Starts, 18)
	if len(st.Groups) != 1 || st.Groups[0].Name != "s1" || st.Groups[0].Started != 2 || st.Groups[0].Starved {
		t.Fatalf("the group waiting: %+v, want s1, 2 starts, not starved", st.Groups)
	}
	mustRelease(t, held)
	serveLine(t, a, lim, []driver.Request{late})

	var weighted []driver.Request
	for i := range 6 {
		weighted = append(weighted, fairAsk(fmt.Sprint("one-", i), "one", 1, T), fairAsk(fmt.Sprint("two-", i), "two", 2, T))
	}
	order = serveLine(t, a, lim, weighted)
	t.Logf("served: %v", order)
	twos := 0
	for _, e := range order[:6] {
		if strings.HasPrefix(e, "two") {
			twos++
		}
	}
	expect.Equal(t, "of the first six starts, the group of weight 2's", twos, 4)
}

// testLimitHeadStart: a run with a head start takes its place in line as
// if it had asked that much earlier: ahead of the runs younger than that,
// behind the older.
func testLimitHeadStart(t *testing.T, k stores) {
	for _, fair := range []bool{false, true} {
		lim := driver.Limit{Name: "fair", Concurrency: 1, Burst: 1, Fair: fair}
		a, _ := limitStores(k, lim)
		T := time.Now().Add(-time.Hour)
		reqs := []driver.Request{fairAsk("a", "g", 1, T), fairAsk("b", "g", 1, T.Add(time.Minute)), fairAsk("c", "g", 1, T.Add(2*time.Minute)), fairAsk("d", "g", 1, T.Add(3*time.Minute))}
		reqs[3].HeadStart = 150 * time.Second // as if at T+30s
		order := serveLine(t, a, lim, reqs)
		expect.Equal(t, fmt.Sprintf("the order (fair: %v)", fair), strings.Join(order, " "), "a d b c")
	}
}

// testLimitFairKeepsGroup: a run that left a fair line (it did not ask
// again within its wait and LimitWaitGrace: its replica stopped) takes its
// group back when it asks again not knowing it (a due run), rather than
// join the group of entities without one.
func testLimitFairKeepsGroup(t *testing.T, k stores) {
	lim := driver.Limit{Name: "fair", Concurrency: 1, Burst: 1, Fair: true}
	a, _ := limitStores(k, lim)
	T := time.Now().Add(-time.Hour)
	held := mustAcquire(t, a, fairAsk("holder", "g", 1, T.Add(-time.Hour)))
	defer mustRelease(t, held)
	gone := fairAsk("gone", "acme", 1, T)
	le := limitedReq(t, a, gone)
	if le == nil {
		t.Fatal("a run granted under a full limit")
	}
	other := fairAsk("other", "g", 1, T)
	expect.WaitFor(t, le.Wait+driver.LimitWaitGrace+10*time.Second, "the run that did not ask again gone from the line", func() bool {
		limitedReq(t, a, other) // each ask sweeps the line
		st, err := a.Fleet().LimitStatus(bg, lim)
		return err == nil && st.GroupsWaiting == 1
	})
	gone.Group, gone.Grouped = "", false
	limitedReq(t, a, gone)
	st, err := a.Fleet().LimitStatus(bg, lim)
	noErr(t, err)
	var names []string
	for _, g := range st.Groups {
		names = append(names, g.Name)
	}
	slices.Sort(names)
	expect.Equal(t, "the groups waiting", strings.Join(names, ","), "acme,g")
}
