package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// TestReplicasShareTheDuePolls: three replicas that announced the same task
// look at its bucket as often, together, as one alone would (one poll in
// three each), so the polls' Redis work does not grow with the replicas; a
// replica with a task of its own still looks at its bucket every poll. An
// entry due is taken at the next poll that looks, and a replica that found
// one looks again at its very next poll: a backlog is taken at the full
// rate. Without the sharing, the three send three times the reads.
func TestReplicasShareTheDuePolls(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	mine, other := twoBuckets()
	shared := []*Store{}
	for _, id := range []string{"r1", "r2", "r3"} {
		s := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: id})
		s.InitEpoch(bg) //nolint:errcheck
		shared = append(shared, s)
	}
	alone := newRedisStore(t, newClient(t, srv.Addr), Options{Replica: "r4"})
	// Each announces twice: the second announcement sees all four.
	for range 2 {
		for _, s := range shared {
			announce(t, s, mine)
		}
		announce(t, alone, other)
	}
	reads := func(polls int, ss ...*Store) int {
		before := redistest.CommandCalls(t, c, "zrange")
		for range polls {
			for _, s := range ss {
				takeDue(t, s, 10)
			}
		}
		return redistest.CommandCalls(t, c, "zrange") - before
	}
	// 30 polls each: 30 reads of the shared bucket in all (the polls that
	// look at every bucket come every 50 × 4 polls, not among these).
	expect.Equal(t, "reads of three replicas sharing a bucket, 30 polls each (not 90)", reads(30, shared...), 30)
	expect.Equal(t, "reads of a replica alone on its task, 30 polls", reads(30, alone), 30)

	// An entry due is taken within three polls of each; two more due are
	// taken at the taker's next two polls.
	for _, e := range []string{"a", "b", "c"} {
		if err := shared[0].Enqueue(bg, driver.Due{Task: mine, Entity: e, Reason: driver.ReasonTrigger}, 0); err != nil {
			t.Fatal(err)
		}
	}
	taker := -1
	for polls := 0; taker < 0 && polls < 3; polls++ {
		for i, s := range shared {
			if len(takeDue(t, s, 1)) == 1 {
				taker = i
				break
			}
		}
	}
	expect.True(t, "the due entry taken within three polls of each replica", taker >= 0)
	for k := range 2 {
		expect.Equal(t, fmt.Sprintf("entries taken at poll %d after the taker found one due", k+1), len(takeDue(t, shared[taker], 1)), 1)
	}
}

func announce(t *testing.T, s *Store, task string) {
	t.Helper()
	if err := s.Fleet().Announce(bg, []string{task}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func takeDue(t *testing.T, s *Store, limit int) []driver.Due {
	t.Helper()
	ds, err := s.TakeDue(bg, limit, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
