package drivertest

import (
	"errors"
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

// testLimitOlderTicksBehind: an older tick's run (a catch-up's, a
// backfill's) waits in a limit's line behind the live ticks' runs, those
// of ticks after it asked too.
func testLimitOlderTicksBehind(t *testing.T, k stores) {
	for _, fair := range []bool{false, true} {
		lim := driver.Limit{Name: "fair", Concurrency: 1, Burst: 1, Fair: fair}
		a, _ := limitStores(k, lim)
		T := time.Now().Add(-time.Hour)
		older := func(r driver.Reason, entity string, tick time.Time) driver.Request {
			return driver.Request{Task: "t", Entity: entity, TTL: time.Minute, Reason: r, Tick: tick, Record: 24 * time.Hour,
				Limits: []string{"fair"}, Group: "g", Weight: 1, Grouped: true}
		}
		// The live ticks' runs take their places after the older runs
		// took theirs (their Since, as if their ticks came later).
		now := time.Now()
		live := func(entity string, since time.Time) driver.Request {
			r := older(driver.ReasonTick, entity, T)
			r.Record, r.Since = 0, since
			return r
		}
		reqs := []driver.Request{older(driver.ReasonBackfill, "x", T.Add(-24*time.Hour)), older(driver.ReasonCatchUp, "y", T.Add(-time.Hour)),
			live("b", now.Add(time.Minute)), live("c", now.Add(2*time.Minute)), live("z", now.Add(3*time.Minute))}
		order := serveLine(t, a, lim, reqs)
		slices.Sort(order[3:]) // the older two asked at once: in either order (of a sharded store's calls)
		expect.Equal(t, fmt.Sprintf("the order (fair: %v)", fair), strings.Join(order, " "), "b c z x y")
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

// testLimitAutoRate: an auto limit paces to the rate an answer says (at
// AutoMargin of it), on every replica; a 429 cuts it (once an AutoHold),
// and, where no rate was said, answers without one raise it: doubled
// before the first 429. Before any answer it starts at AutoStart.
func testLimitAutoRate(t *testing.T, k stores) {
	lim := driver.Limit{Name: "auto", Burst: 1, Auto: true, AutoStart: 1, PerEntity: true}
	a, b := limitStores(k, lim)
	rate := func(s *lease.Store) float64 { // of the budget of entity "" (LimitStatus says the one budget's)
		t.Helper()
		l := lim
		l.PerEntity = false
		st, err := s.Fleet().LimitStatus(bg, l)
		noErr(t, err)
		return st.Rate
	}
	ask := func(s *lease.Store, entity string) []lease.Result {
		return s.AcquireBatch(bg, []driver.Request{
			{Task: "t", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"auto"}},
			{Task: "u", Entity: entity, TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"auto"}},
		})
	}
	// Before any answer: 1 a second.
	res := ask(a, "x")
	var le *lease.LimitedError
	// The next start is a second away; the run is told to ask again
	// AutoAhead times sooner (the rate may have risen by then).
	if res[0].Err != nil || !errors.As(res[1].Err, &le) || le.Why != driver.LimitRate || le.Wait < time.Second/driver.AutoAhead-50*time.Millisecond {
		t.Fatalf("before any answer: %v, %v; want one start, then a second's wait", res[0].Err, res[1].Err)
	}
	mustRelease(t, res[0].Lease)
	// Told 20 a second, by one replica: the other paces at 19.
	noErr(t, a.Budgets().Learn(bg, lim, "", driver.RateSeen{Rate: 20, Source: `RateLimit-Policy "default";q=20;w=1`}))
	expect.Equal(t, "the rate learned", rate(b), 19.0)
	l := lim
	l.PerEntity = false
	st, err := b.Fleet().LimitStatus(bg, l)
	noErr(t, err)
	expect.Equal(t, "what it was learned from", st.RateSource, `RateLimit-Policy "default";q=20;w=1`)
	noErr(t, a.Budgets().Learn(bg, lim, "y", driver.RateSeen{Rate: 20}))
	res = ask(b, "y")
	if res[0].Err != nil || !errors.As(res[1].Err, &le) || le.Wait > 60*time.Millisecond {
		t.Fatalf("at 19 a second: %v, %v; want one start, then about 53ms", res[0].Err, res[1].Err)
	}
	mustRelease(t, res[0].Lease)
	// A 429 cuts it, once a hold.
	expect.WaitFor(t, 5*time.Second, "a 429 cutting the rate", func() bool {
		noErr(t, b.Budgets().Learn(bg, lim, "", driver.RateSeen{TooMany: true}))
		return rate(a) < 19
	})
	expect.Equal(t, "the rate after a 429", rate(a), 19*driver.AutoDecrease)
	// No rate said: answers raise it, doubled before any 429.
	noErr(t, a.Budgets().Learn(bg, lim, "z", driver.RateSeen{}))
	expect.WaitFor(t, 5*time.Second, "answers raising the rate", func() bool {
		noErr(t, a.Budgets().Learn(bg, lim, "z", driver.RateSeen{}))
		res := ask(b, "z")
		for _, r := range res {
			if r.Lease != nil {
				mustRelease(t, r.Lease)
			}
		}
		return errors.As(res[1].Err, &le) && le.Wait <= time.Second/4/driver.AutoAhead+5*time.Millisecond // 4 a second: doubled twice
	})
}

// testLimitAutoBurstsAfterPauses: answers raise an auto rate only while
// the starts go at it. Runs that come in bursts, each after a pause longer
// than the rate's interval, find the budget's burst unused every time: a
// run refused in such a burst is held back by its burst, not by the rate,
// and the rate stays. (A loaded replica asked so, late and all at once: a
// rate doubled each second to thousands while 5 calls a second went out,
// then was spent on the API at once as a storm of 429s.) Runs that ask
// again as soon as they are told raise it.
func testLimitAutoBurstsAfterPauses(t *testing.T, k stores) {
	lim := driver.Limit{Name: "bursts", Burst: 1, Auto: true, AutoStart: 20}
	a, _ := limitStores(k, lim)
	rate := func() float64 {
		st, err := a.Fleet().LimitStatus(bg, lim)
		noErr(t, err)
		return st.Rate
	}
	burst := func(round int) (refused int) {
		var reqs []driver.Request
		for i := range 3 {
			reqs = append(reqs, driver.Request{Task: "t", Entity: fmt.Sprint("r", i), TTL: time.Minute, Reason: driver.ReasonTrigger, Limits: []string{"bursts"}})
		}
		for _, r := range a.AcquireBatch(bg, reqs) {
			var le *lease.LimitedError
			switch {
			case r.Lease != nil:
				mustRelease(t, r.Lease)
			case errors.As(r.Err, &le) && le.Why == driver.LimitRate:
				refused++
			default:
				t.Fatalf("round %d: %v", round, r.Err)
			}
		}
		noErr(t, a.Budgets().Learn(bg, lim, "", driver.RateSeen{}))
		return refused
	}
	// 20 a second: the burst of one is back 50ms after a start. A pause of
	// 150ms leaves it unused for 100ms; load only lengthens the pause.
	for round, end := 0, time.Now().Add(2500*time.Millisecond); time.Now().Before(end); round++ {
		if burst(round) != 2 {
			t.Fatalf("round %d: want one start and two runs refused for the rate", round)
		}
		time.Sleep(150 * time.Millisecond) // the pause is the scenario, not a wait
	}
	got := rate()
	expect.True(t, fmt.Sprintf("the rate after 2.5s of bursts after pauses is the start's, 20: %v (0: none learned)", got), got == 0 || got == 20)
	round := 1000
	expect.WaitFor(t, 5*time.Second, "runs asking again at once raising the rate", func() bool {
		round++
		burst(round)
		return rate() > 20
	})
}
