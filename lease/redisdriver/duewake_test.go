package redisdriver

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tier"
	"github.com/tickd/tickd/lease/driver"
)

// TestIdleDuePollsWaitForWakeUps: a replica's due poll that found nothing
// due sends nothing until its buckets' earliest entry is due (here an
// hour: the test's dueIdle), and an entry that comes before it, enqueued
// by a process that does not poll (tickd trigger), wakes it: the next poll
// takes it. Without the wake-up only a poll of all buckets would (every
// AllBucketsEvery polls; this test makes 23); without the wait, every
// poll reads the 64 due sets' heads. An entry that is not the earliest
// wakes no one (publishes nothing).
func TestIdleDuePollsWaitForWakeUps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	b := recordsDriver(t, newClient(t, srv.Addr), "r1")
	b.dueIdle = time.Hour
	trigger := recordsDriver(t, newClient(t, srv.Addr), "cli")
	announceT(t, b)
	b.WatchRevocations(t.Context(), func(string, string, int64, driver.Revocation) {})
	expect.WaitFor(t, 10*time.Second, "the replica subscribed to the wake-ups", func() bool {
		return b.wakes.Load() && c.PubSubNumSub(bg, b.k.dueWake()).Val()[b.k.dueWake()] == 1
	})
	take := func() []driver.Due {
		ds, err := b.Take(bg, 10, time.Minute, "tok")
		must(t, "Take", err)
		return ds
	}
	enqueue := func(entity string, delay time.Duration) {
		_, err := trigger.Enqueue(bg, driver.Due{Task: "t", Entity: entity, Reason: driver.ReasonTrigger}, delay)
		must(t, "Enqueue", err)
	}
	expect.Equal(t, "entries taken at the first look", len(take()), 0)
	looks := redistest.CommandCalls(t, c, "zrange")
	for range 20 {
		take()
	}
	expect.Equal(t, "due sets read by 20 idle polls", redistest.CommandCalls(t, c, "zrange")-looks, 0)

	enqueue("later", time.Hour+time.Minute) // the earliest of an empty set: it wakes for an hour and a minute on
	published := redistest.CommandCalls(t, c, "publish")
	enqueue("latest", 2*time.Hour) // not the earliest
	expect.Equal(t, "wake-ups published for an entry that is not the earliest", redistest.CommandCalls(t, c, "publish")-published, 0)
	enqueue("now", 0)
	expect.WaitFor(t, 30*time.Second, "the replica woken", func() bool { return b.nextLook.Load() <= time.Now().UnixNano() })
	got := take()
	expect.Equal(t, "entries the poll after the wake-up took", len(got), 1)
	expect.Equal(t, "the entry taken", got[0].Entity, "now")
}

// TestDueWakeUpsOnACluster: on a Redis Cluster, a wake-up published by
// the node that holds the entry's bucket reaches the replica, whichever
// node its subscription is on (a Cluster's PUBLISH goes to every node), and
// the replica's next poll takes the entry.
func TestDueWakeUpsOnACluster(t *testing.T) {
	t.Parallel()
	tier.Full(t, "a Redis Cluster")
	cl := redistest.StartCluster(t)
	driverOn := func(replica string) *redisDriver {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { c.Close() })
		return recordsDriverOn(t, c, "cw", replica)
	}
	b, trigger := driverOn("r1"), driverOn("cli")
	b.dueIdle = time.Hour
	announceT(t, b)
	b.WatchRevocations(t.Context(), func(string, string, int64, driver.Revocation) {})
	expect.WaitFor(t, 10*time.Second, "the replica subscribed to the wake-ups", b.wakes.Load)
	_, err := b.Take(bg, 10, time.Minute, "tok")
	must(t, "Take", err)
	_, err = trigger.Enqueue(bg, driver.Due{Task: "t", Entity: "now", Reason: driver.ReasonTrigger}, 0)
	must(t, "Enqueue", err)
	expect.WaitFor(t, 30*time.Second, "the replica woken", func() bool { return b.nextLook.Load() <= time.Now().UnixNano() })
	got, err := b.Take(bg, 10, time.Minute, "tok")
	must(t, "Take", err)
	expect.Equal(t, "entries the poll after the wake-up took", len(got), 1)
}

// TestWakeUpsRefusedByAnACL: a Redis user whose ACL lets tickd hear
// revocations but not the due wake-ups loses neither: the revocations are
// heard, and the due polls look at every poll, as without wake-ups. With
// both channels in one subscription, the ACL refuses both.
func TestWakeUpsRefusedByAnACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	must(t, "ACL SETUSER", c.Do(bg, "ACL", "SETUSER", "tickd", "on", ">pw", "~*", "resetchannels", "&ck:revoked", "+@all").Err())
	uc := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "tickd", Password: "pw"})
	t.Cleanup(func() { uc.Close() })
	b := recordsDriver(t, uc, "r1")
	announceT(t, b)
	heard := make(chan string, 1)
	b.WatchRevocations(t.Context(), func(task, entity string, _ int64, _ driver.Revocation) {
		select {
		case heard <- task + "/" + entity:
		default:
		}
	})
	expect.WaitFor(t, 10*time.Second, "the replica subscribed to revocations", func() bool {
		return c.PubSubNumSub(bg, b.k.revoked()).Val()[b.k.revoked()] == 1
	})
	must(t, "PUBLISH", c.Publish(bg, b.k.revoked(), "t e 7 "+revocationRevoked).Err())
	select {
	case got := <-heard:
		expect.Equal(t, "the revocation heard", got, "t/e")
	case <-time.After(10 * time.Second):
		t.Fatal("the revocation was not heard in 10s")
	}
	looks := redistest.CommandCalls(t, c, "zrange")
	for range 5 {
		if _, err := b.Take(bg, 10, time.Minute, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	expect.Equal(t, "due sets read by 5 polls without wake-ups", redistest.CommandCalls(t, c, "zrange")-looks, 5)
}

// announceT announces task t for a minute: its bucket is b's to poll.
func announceT(t *testing.T, b *redisDriver) {
	must(t, "Announce", b.Announce(bg, driver.Announcement{Until: time.Now().Add(time.Minute).UnixMilli(), Tasks: []string{"t"}, Process: "p1"}, time.Minute))
}
