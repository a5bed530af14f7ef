package redisdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// chunkScript runs lua/chunk.lua: ARGV "decode" and a record (answered as
// a JSON object, nil when not understood), "encode" and the fields as a
// JSON object, or "detach", the hash and a field (answered 1 when it moved
// the field's state).
var chunkScript = testScript(luaFile("chunk") + `
local NUMBERS = {'held', 'ended', 'exp', 'odd', 'tick', 'fence', 'since'}
if ARGV[1] == 'decode' then
  local c = decode_chunk(ARGV[2])
  if not c then return nil end
  for _, k in ipairs(NUMBERS) do c[k] = num(c[k]) end
  return cjson.encode(c)
elseif ARGV[1] == 'encode' then
  local c = cjson.decode(ARGV[2])
  for _, k in ipairs(NUMBERS) do c[k] = tonumber(c[k]) end
  return encode_chunk(c)
end
if detach(ARGV[2], ARGV[3]) then return 1 end
return 0
`)

func chunkFields(c chunkRecord) map[string]string {
	return map[string]string{"tick": itoa(c.Tick), "fence": itoa(c.Fence), "holder": driver.Escape(c.Holder), "prefix": c.Prefix,
		"exp": itoa(c.Exp), "held": itoa(int64(c.Held)), "odd": itoa(int64(c.Odd)), "since": itoa(c.Since), "ended": itoa(c.Ended)}
}

// TestChunkCodecsAgree: chunks.go's record codec and chunk.lua's read and
// write the same string into the same named fields, with a hostile holder
// and the largest numbers a script computes exactly (maxExact: Lua's are
// doubles, and every number of a record is one a script computed);
// neither understands a record cut short.
const maxExact = 1<<53 - 1

func TestChunkCodecsAgree(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Addr)
	for _, rec := range []chunkRecord{
		{},
		{Tick: 1796018400000, Fence: 1796018409910403, Holder: hostile, Prefix: "k3x.", Exp: maxExact, Held: 0xffff, Odd: 0x8001, Since: maxExact, Ended: maxExact},
		{Tick: 1796018400000, Fence: 1796018409910403, Holder: "r", Prefix: "k3x.", Exp: maxExact, Held: 0xffffffff, Odd: 0x80000001, Since: 1, Ended: 2},
	} {
		v := rec.encode()
		back, err := decodeChunk(v)
		must(t, "decodeChunk", err)
		expect.Equal(t, "Go's round trip", back, rec)
		js, err := chunkScript.Run(bg, c, nil, "decode", v).Text()
		must(t, "decode_chunk", err)
		var got map[string]string
		must(t, "its JSON", json.Unmarshal([]byte(js), &got))
		expect.Same(t, "decode_chunk's fields", got, chunkFields(rec))
		fs, _ := json.Marshal(chunkFields(rec))
		enc, err := chunkScript.Run(bg, c, nil, "encode", string(fs)).Text()
		must(t, "encode_chunk", err)
		expect.Equal(t, "encode_chunk", enc, v)
	}
	whole := chunkRecord{Tick: 1, Fence: 2, Holder: "h", Prefix: "p."}.encode()
	for _, short := range []string{whole[:recordHead], whole[:recordHead-1] + "|", whole[:recordHead] + "p."} {
		_, err := decodeChunk(short)
		expect.True(t, "Go refuses a record cut short", err != nil)
		_, err = chunkScript.Run(bg, c, nil, "decode", short).Text()
		expect.True(t, "Lua refuses it too", err != nil)
	}
	for _, bad := range []string{"", "id", "id:0", "id:33", "id:01", ":3"} {
		_, err := decodeIndex(bad)
		expect.True(t, "an index "+bad+" is refused", err != nil)
	}
	x, err := decodeIndex(chunkIndex{"abc", maxChunk}.encode())
	must(t, "an index's round trip", err)
	expect.Equal(t, "the index", x, chunkIndex{"abc", maxChunk})
}

// TestDetach: a chunk's position moves out of its record into its own
// value as the per-entity scripts would have left it: held under the
// grant's token while the grant holds it, else released done with its
// run record; its last tick and fence are the grant's, an odd position
// and a field without an index are left alone, and a second detach moves
// nothing.
func TestDetach(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Addr)
	const h = "{t}:entities"
	rec := chunkRecord{Tick: 1796018400000, Fence: 1796018400001234, Holder: "r 1", Prefix: "k3x.", Exp: 1796018405000,
		Held: 0b101, Odd: 0b1000, Since: 1796018400010, Ended: 1796018400020}
	old := entityValue{LastTick: 1796014800000, Fence: 1796014800004321, Touched: 1796014800030,
		Last: &runRecord{Outcome: driver.OutcomeFailed, Start: 1796014800010, End: 1796014800030, Fence: 1796014800004321, Reason: driver.ReasonTick, Replica: "r2"}}
	odd := entityValue{LastTick: 1796018400000, Fence: 99, Token: "mine", Exp: 1796018405000, Touched: 1, Reason: driver.ReasonTrigger, Holder: "r3"}
	must(t, "setup", c.HSet(bg, h, chunkMark+"c1", rec.encode(),
		indexMark+"held", chunkIndex{"c1", 1}.encode(), indexMark+"done", chunkIndex{"c1", 2}.encode(),
		indexMark+"new", chunkIndex{"c1", 3}.encode(), indexMark+"odd", chunkIndex{"c1", 4}.encode(), indexMark+"fresh", chunkIndex{"c1", 5}.encode(),
		"done", old.encode(), "odd", odd.encode(), "alone", old.encode()).Err())
	detach := func(field string) bool {
		n, err := chunkScript.Run(bg, c, []string{h}, "detach", h, field).Int()
		must(t, "detach "+field, err)
		return n == 1
	}
	value := func(field string) entityValue {
		v, err := c.HGet(bg, h, field).Result()
		must(t, "the value of "+field, err)
		e, err := decodeEntity(v)
		must(t, "decode "+field, err)
		return e
	}
	// What status reads of a position the record holds (view) is what a
	// detach writes for an entity without a value.
	views := map[string]int{"held": 1, "new": 3, "fresh": 5}
	want := map[string]entityValue{}
	for f, pos := range views {
		v, ok := rec.view(pos)
		expect.True(t, f+" is in the record's view", ok)
		want[f] = v
	}
	_, ok := rec.view(4)
	expect.True(t, "an odd position is not", !ok)
	for _, f := range []string{"held", "done", "new", "fresh"} {
		expect.True(t, f+" is detached", detach(f))
		expect.True(t, f+" is detached once", !detach(f))
	}
	expect.True(t, "an odd position is not", !detach("odd"))
	expect.True(t, "a field without an index is not", !detach("alone"))
	expect.Same(t, "held", value("held"), entityValue{LastTick: rec.Tick, Fence: rec.Fence, Token: "k3x.1", Exp: rec.Exp,
		Touched: rec.Since, Reason: driver.ReasonTick, Tick: rec.Tick, Holder: "r 1"})
	expect.Same(t, "released", value("done"), entityValue{LastTick: rec.Tick, Fence: rec.Fence, Touched: rec.Ended,
		Last: &runRecord{Outcome: driver.OutcomeDone, Start: rec.Since, End: rec.Ended, Fence: rec.Fence, Reason: driver.ReasonTick, Replica: "r 1"}})
	expect.Same(t, "held, without a value before", value("new"), entityValue{LastTick: rec.Tick, Fence: rec.Fence, Token: "k3x.3", Exp: rec.Exp,
		Touched: rec.Since, Reason: driver.ReasonTick, Tick: rec.Tick, Holder: "r 1"})
	for f := range views {
		expect.Same(t, f+": what status read before is what the detach wrote", value(f), want[f])
	}
	expect.Same(t, "odd", value("odd"), odd)
	expect.Same(t, "alone", value("alone"), old)
	v, err := c.HGet(bg, h, chunkMark+"c1").Result()
	must(t, "the record", err)
	after, err := decodeChunk(v)
	must(t, "decode the record", err)
	after1 := rec
	after1.Held, after1.Odd = 0, 0b11111
	expect.Equal(t, "the record after", after, after1)
}

// must stops the test at err, naming what failed.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// recordsDriver is a driver on a Redis of its own that keeps a tick's
// chunks as records, its epochs initialised.
func recordsDriver(t *testing.T, c *redis.Client, replica string) *redisDriver {
	return recordsDriverOn(t, c, "ck", replica)
}

// recordsDriverOn is recordsDriver on any client, under prefix.
func recordsDriverOn(t *testing.T, c RedisClient, prefix, replica string) *redisDriver {
	d, err := New(c, prefix, driver.AcksNever)
	must(t, "New", err)
	b := d.(*redisDriver)
	b.records.Store(true)
	b.Configure(driver.Config{Replica: replica, MaxTTL: func() time.Duration { return 5 * time.Second }})
	must(t, "InitEpoch", b.InitEpoch(bg))
	return b
}

// chunkOf asks for a tick's leases of entities e1 to e16, one chunk, under
// the tokens prefix.1 to prefix.16.
func chunkOf(t *testing.T, b *redisDriver, tick time.Time, prefix string) []driver.AcquireReply {
	return chunkOfN(t, b, tick, prefix, 16)
}

// chunkOfN is chunkOf for entities e1 to en.
func chunkOfN(t *testing.T, b *redisDriver, tick time.Time, prefix string, n int) []driver.AcquireReply {
	args := make([]driver.AcquireArg, n)
	for j := range args {
		args[j] = driver.AcquireArg{Token: prefix + "." + strconv.Itoa(j+1), Req: &driver.Request{Task: "sync", Entity: "e" + strconv.Itoa(j+1),
			TTL: 5 * time.Second, Reason: driver.ReasonTick, Tick: tick, Chunk: "c1"}}
	}
	rs, err := b.Acquire(bg, args)
	must(t, "Acquire", err)
	return rs
}

// answers is each distinct answer of rs and its count, in order.
func answers(rs []driver.AcquireReply) string {
	var out []string
	for i, r := range rs {
		s := string(r.Status)
		if r.Status == driver.GrantOK {
			s += " " + strconv.FormatInt(r.Fence, 10)
		}
		if i > 0 && strings.HasPrefix(out[len(out)-1], s+" ×") {
			n, _ := strconv.Atoi(out[len(out)-1][len(s)+3:])
			out[len(out)-1] = s + " ×" + strconv.Itoa(n+1)
			continue
		}
		out = append(out, s+" ×1")
	}
	return strings.Join(out, ", ")
}

// TestChunkRecordsGrant: with records, a tick's chunk granted plainly
// entity by entity becomes a record (its values gone, each entity
// indexed); the next tick's chunk is answered by the record alone: busy
// while its grant holds every entity, one fence for all once free, ran for
// a second replica of the same tick, and an entity asked for alone (a due
// run) is detached first and decided as today.
func TestChunkRecordsGrant(t *testing.T) {
	t.Parallel()
	c, b, rec := chunkEnv(t)
	h := b.k.entities("sync")
	t1 := time.UnixMilli(1796018400000)
	first := chunkOf(t, b, t1, "a")
	expect.True(t, "the first tick is granted entity by entity: "+answers(first), first[0].Status == driver.GrantOK && answers(first) == "ok "+strconv.FormatInt(first[0].Fence, 10)+" ×16")
	r := rec()
	expect.Same(t, "its record", r, chunkRecord{Tick: t1.UnixMilli(), Fence: first[0].Fence, Holder: "r1", Prefix: "a.", Exp: r.Exp, Held: 0xffff, Since: r.Since})
	n, err := c.HLen(bg, h).Result()
	must(t, "HLEN", err)
	expect.Equal(t, "its values are gone: a record, 16 indexes and the task's mark", n, int64(18))
	ix, err := c.HGet(bg, h, indexMark+"e16").Result()
	must(t, "the index", err)
	expect.Equal(t, "e16's index", ix, recordOf(16)+":16")

	t2 := t1.Add(time.Minute)
	expect.Equal(t, "the next tick while the grant holds them", answers(chunkOf(t, b, t2, "b")), "busy ×16")
	none := func(what string) {
		t.Helper()
		n, err := c.HExists(bg, h, "e1").Result()
		must(t, "HEXISTS", err)
		expect.True(t, what+": no value written", !n)
		expect.Equal(t, what+": no entity odd", rec().Odd, uint32(0))
	}
	none("busy")
	// Released (the release by grant is the next step: the record is
	// written as it will write it).
	r.Held, r.Ended = 0, r.Since+1
	must(t, "release", c.HSet(bg, h, chunkMark+recordOf(16), r.encode()).Err())
	t3 := t2.Add(time.Minute)
	second := chunkOf(t, b, t3, "c")
	expect.True(t, "then one fence for all, above the first: "+answers(second), second[0].Fence > first[0].Fence && answers(second) == "ok "+strconv.FormatInt(second[0].Fence, 10)+" ×16")
	expect.Equal(t, "the record's prefix", rec().Prefix, "c.")
	none("granted")
	other := recordsDriver(t, c, "r2")
	expect.Equal(t, "a second replica's fan-out of the tick", answers(chunkOf(t, other, t3, "d")), "ran ×16")

	// A due run of e3: detached (held under c.3), then decided: busy.
	rs, err := b.Acquire(bg, []driver.AcquireArg{{Token: "x", Req: &driver.Request{Task: "sync", Entity: "e3", TTL: 5 * time.Second, Reason: driver.ReasonTrigger}}})
	must(t, "Acquire e3", err)
	expect.Equal(t, "e3 alone", answers(rs), "busy ×1")
	v, err := c.HGet(bg, h, "e3").Result()
	must(t, "e3's value", err)
	e3, err := decodeEntity(v)
	must(t, "decode e3", err)
	expect.Equal(t, "e3's token", e3.Token, "c.3")
	expect.Equal(t, "e3's fence", e3.Fence, second[0].Fence)
	expect.Equal(t, "e3 is odd in the record", rec().Odd, uint32(1<<2))
	t4 := t3.Add(time.Minute)
	r = rec()
	r.Held = 0 // the others released
	must(t, "release the others", c.HSet(bg, h, chunkMark+recordOf(16), r.encode()).Err())
	third := chunkOf(t, b, t4, "e")
	expect.Equal(t, "a chunk with an odd entity goes entity by entity", answers(third), "ok "+strconv.FormatInt(third[0].Fence, 10)+" ×2, busy ×1, ok "+strconv.FormatInt(third[0].Fence, 10)+" ×13")
}

// TestChunkRecordsReleaseAndRenew: with records, a chunk's leases renew by
// their grant (the record's expiry moves, no value is written) and release
// by it when their runs end done; a run that failed is detached and
// released by its own value, with its run record; a lease its grant no
// longer holds (released) is lost at a renewal, one of a token the record
// does not know is not held; and once every entity is free again the next
// tick makes the chunk one record again, nothing odd.
func TestChunkRecordsReleaseAndRenew(t *testing.T) {
	t.Parallel()
	c, b, rec := chunkEnv(t)
	h := b.k.entities("sync")
	hlen := func() int64 {
		n, err := c.HLen(bg, h).Result()
		must(t, "HLEN", err)
		return n
	}
	t1 := time.UnixMilli(1796018400000)
	granted := chunkOf(t, b, t1, "a")
	ls := make([]*driver.Lease, 16)
	for j := range ls {
		ls[j] = &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j+1), Token: "a." + strconv.Itoa(j+1), TTL: time.Hour,
			Reason: driver.ReasonTick, Tick: t1, Fence: granted[j].Fence}
	}
	renewed, err := b.Renew(bg, ls)
	must(t, "Renew", err)
	expect.Equal(t, "renewed", fmt.Sprint(renewed), fmt.Sprint(slices.Repeat([]driver.Renewal{driver.RenewOK}, 16)))
	expect.True(t, "the grant's expiry moved an hour on", rec().Exp > time.Now().Add(50*time.Minute).UnixMilli())
	expect.Equal(t, "no value written", hlen(), int64(18))

	release := func(outcome driver.Outcome, js ...int) []driver.ReleaseReply {
		t.Helper()
		args := make([]driver.ReleaseArg, len(js))
		for k, j := range js {
			args[k] = driver.ReleaseArg{Lease: ls[j], Finished: driver.Finished{Outcome: outcome, Started: t1, Ended: t1.Add(time.Second)}}
		}
		out, err := b.Release(bg, args)
		must(t, "Release", err)
		return out
	}
	for _, r := range release(driver.OutcomeDone, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9) {
		expect.True(t, "released done", r.Err == nil && !r.FollowUp)
	}
	expect.Equal(t, "the grant holds the other six", rec().Held, uint32(0xffff&^0x3ff))
	expect.Equal(t, "still no value written", hlen(), int64(18))
	failed := release(driver.OutcomeFailed, 10)
	expect.True(t, "released failed", failed[0].Err == nil)
	v, err := c.HGet(bg, h, "e11").Result()
	must(t, "e11's value", err)
	e11, err := decodeEntity(v)
	must(t, "decode e11", err)
	expect.True(t, "e11 is free, its last run failed", e11.Token == "" && e11.Last != nil && e11.Last.Outcome == driver.OutcomeFailed && e11.Last.Fence == granted[10].Fence)
	r := rec()
	expect.True(t, "e11 is odd, out of the grant", r.Odd == 1<<10 && r.Held == 0xffff&^0x7ff)
	lost, err := b.Renew(bg, []*driver.Lease{ls[0], ls[11]})
	must(t, "Renew", err)
	expect.Equal(t, "a released lease is lost, a held one renewed", fmt.Sprint(lost), fmt.Sprint([]driver.Renewal{driver.RenewLost, driver.RenewOK}))
	stranger := *ls[12]
	stranger.Token = "z.13"
	out, err := b.Release(bg, []driver.ReleaseArg{{Lease: &stranger, Finished: driver.Finished{Outcome: driver.OutcomeDone}}})
	must(t, "Release", err)
	expect.True(t, "a token the record does not know is not held", errors.Is(out[0].Err, driver.ErrNotHeld))
	release(driver.OutcomeDone, 11, 12, 13, 14, 15)
	expect.Equal(t, "every entity free", rec().Held, uint32(0))

	next := chunkOf(t, b, t1.Add(time.Minute), "b")
	expect.Equal(t, "the next tick", answers(next), "ok "+strconv.FormatInt(next[0].Fence, 10)+" ×16")
	r = rec()
	expect.True(t, "one record again, nothing odd", r.Odd == 0 && r.Prefix == "b." && r.Held == 0xffff)
	expect.Equal(t, "e11's value gone", hlen(), int64(18))
}

// TestGrantsNameTheirRecord: the driver that made a chunk's grant renews
// and releases it by its record's name, not through its entities' index
// (here deleted): the grant is renewed and released whole. Another driver,
// which did not make it, goes through the index, and without one finds
// nothing to renew.
func TestGrantsNameTheirRecord(t *testing.T) {
	t.Parallel()
	c, b, rec := chunkEnv(t)
	h := b.k.entities("sync")
	t1 := time.UnixMilli(1796018400000)
	chunkOf(t, b, t1, "a") // the record is made
	releaseChunk(t, b, "a", t1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	t2 := t1.Add(time.Minute)
	expect.Equal(t, "the next tick, by the record", answers(chunkOf(t, b, t2, "b"))[:3], "ok ")
	ixs := make([]string, 16)
	for j := range ixs {
		ixs[j] = indexMark + "e" + strconv.Itoa(j+1)
	}
	must(t, "delete the index", c.HDel(bg, h, ixs...).Err())
	ls := make([]*driver.Lease, 16)
	for j := range ls {
		ls[j] = &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j+1), Token: "b." + strconv.Itoa(j+1), TTL: time.Hour, Reason: driver.ReasonTick, Tick: t2}
	}
	other := recordsDriver(t, c, "r1")
	lost, err := other.Renew(bg, ls[:1])
	must(t, "Renew by another driver", err)
	expect.Equal(t, "another driver, without the index", fmt.Sprint(lost), fmt.Sprint([]driver.Renewal{driver.RenewLost}))
	renewed, err := b.Renew(bg, ls)
	must(t, "Renew", err)
	expect.Equal(t, "renewed by the record's name", fmt.Sprint(renewed), fmt.Sprint(slices.Repeat([]driver.Renewal{driver.RenewOK}, 16)))
	expect.True(t, "the grant's expiry moved an hour on", rec().Exp > time.Now().Add(50*time.Minute).UnixMilli())
	releaseChunk(t, b, "b", t2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	r := rec()
	expect.True(t, "released whole, nothing odd", r.Held == 0 && r.Odd == 0)
}

// TestChunkRecordsOf32: a chunk of maxChunk entities, every bit of the
// record's masks: attached whole (held 2^32 - 1, which Lua's signed bit
// library must not turn negative), renewed and released by its grant, the
// top position detached alone, and answered by its record at the next
// tick; a run longer than maxChunk goes entity by entity.
func TestChunkRecordsOf32(t *testing.T) {
	t.Parallel()
	c, b, _ := chunkEnv(t)
	rec := func() chunkRecord { return readRecord(t, c, b, maxChunk) }
	t1 := time.UnixMilli(1796018400000)
	first := chunkOfN(t, b, t1, "a", maxChunk)
	expect.Equal(t, "the first tick", answers(first), "ok "+strconv.FormatInt(first[0].Fence, 10)+" ×32")
	expect.Equal(t, "every position held", rec().Held, uint32(0xffffffff))
	ls := make([]*driver.Lease, maxChunk)
	for j := range ls {
		ls[j] = &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j+1), Token: "a." + strconv.Itoa(j+1), TTL: time.Hour,
			Reason: driver.ReasonTick, Tick: t1, Fence: first[j].Fence}
	}
	renewed, err := b.Renew(bg, ls)
	must(t, "Renew", err)
	expect.Equal(t, "renewed", fmt.Sprint(renewed), fmt.Sprint(slices.Repeat([]driver.Renewal{driver.RenewOK}, maxChunk)))
	args := make([]driver.ReleaseArg, 0, maxChunk)
	for _, l := range ls[16:31] {
		args = append(args, driver.ReleaseArg{Lease: l, Finished: driver.Finished{Outcome: driver.OutcomeDone, Started: t1, Ended: t1.Add(time.Second)}})
	}
	out, err := b.Release(bg, args)
	must(t, "Release", err)
	for _, r := range out {
		expect.True(t, "released done", r.Err == nil && !r.FollowUp)
	}
	expect.Equal(t, "the grant holds 1 to 16 and 32", rec().Held, uint32(0x8000ffff))
	rs, err := b.Acquire(bg, []driver.AcquireArg{{Token: "x", Req: &driver.Request{Task: "sync", Entity: "e32", TTL: 5 * time.Second, Reason: driver.ReasonTrigger}}})
	must(t, "Acquire e32", err)
	expect.Equal(t, "e32 alone, detached", answers(rs), "busy ×1")
	r := rec()
	expect.True(t, "e32 is odd, out of the grant", r.Odd == 1<<31 && r.Held == 0xffff)
	args = args[:0]
	for _, l := range append(ls[:16:16], ls[31]) {
		args = append(args, driver.ReleaseArg{Lease: l, Finished: driver.Finished{Outcome: driver.OutcomeDone, Started: t1, Ended: t1.Add(time.Second)}})
	}
	out, err = b.Release(bg, args)
	must(t, "Release", err)
	for _, r := range out {
		expect.True(t, "released", r.Err == nil)
	}
	expect.Equal(t, "every entity free", rec().Held, uint32(0))
	next := chunkOfN(t, b, t1.Add(time.Minute), "b", maxChunk)
	expect.Equal(t, "the next tick, e32 odd", answers(next), "ok "+strconv.FormatInt(next[0].Fence, 10)+" ×32")
	r = rec()
	expect.True(t, "one record again, nothing odd", r.Odd == 0 && r.Prefix == "b." && r.Held == 0xffffffff)
	third := chunkOfN(t, b, t1.Add(2*time.Minute), "c", maxChunk)
	expect.Equal(t, "busy from the record", answers(third), "busy ×32")

	long := chunkOfN(t, recordsDriver(t, c, "r2"), t1, "d", maxChunk+1)
	expect.Equal(t, "a run of 33 goes entity by entity: e33 is new, the rest ran", answers(long), "ran ×32, ok "+strconv.FormatInt(long[32].Fence, 10)+" ×1")
}

// TestChunkRecordsPartialChunk: a chunk's name sent with only some of its
// entities (a caller's limit refused the others, or a batch cut it) is
// never answered by the record of the whole chunk (its record is the
// part's own, named by its fields): position j of the record is the j-th
// entity of the chunk, not of the part sent. Without it, the part e1-e4, e7-e16 was granted from the record,
// e7 under e5's position: e5 then read busy and e16 free while it ran.
func TestChunkRecordsPartialChunk(t *testing.T) {
	t.Parallel()
	c, b, rec := chunkEnv(t)
	t1 := time.Now().Add(-time.Hour).Truncate(time.Minute)
	first := chunkOf(t, b, t1, "a")
	ls := make([]*driver.Lease, 16)
	args := make([]driver.ReleaseArg, 16)
	for j := range ls {
		ls[j] = &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j+1), Token: "a." + strconv.Itoa(j+1), TTL: time.Hour, Reason: driver.ReasonTick, Tick: t1, Fence: first[j].Fence}
		args[j] = driver.ReleaseArg{Lease: ls[j], Finished: driver.Finished{Outcome: driver.OutcomeDone, Started: t1, Ended: t1.Add(time.Second)}}
	}
	_, err := b.Release(bg, args)
	must(t, "Release", err)
	expect.Equal(t, "a record of 16, free", rec().Held, uint32(0))
	t2 := t1.Add(time.Minute)
	var part []driver.AcquireArg
	for _, j := range []int{1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16} {
		part = append(part, driver.AcquireArg{Token: "b." + strconv.Itoa(len(part)+1), Req: &driver.Request{Task: "sync", Entity: "e" + strconv.Itoa(j),
			TTL: 5 * time.Second, Reason: driver.ReasonTick, Tick: t2, Chunk: "c1"}})
	}
	rs, err := b.Acquire(bg, part)
	must(t, "Acquire the part", err)
	expect.Equal(t, "the part", answers(rs), "ok "+strconv.FormatInt(rs[0].Fence, 10)+" ×14")
	alone := func(e string) string {
		t.Helper()
		rs, err := b.Acquire(bg, []driver.AcquireArg{{Token: "x" + e, Req: &driver.Request{Task: "sync", Entity: e, TTL: 5 * time.Second, Reason: driver.ReasonTrigger}}})
		must(t, "Acquire "+e, err)
		return string(rs[0].Status)
	}
	expect.Equal(t, "e5, not asked for in the part, is free", alone("e5"), string(driver.GrantOK))
	expect.Equal(t, "e16, running, is busy", alone("e16"), string(driver.GrantBusy))
	expect.Equal(t, "e7, running, is busy", alone("e7"), string(driver.GrantBusy))
	_ = c
}

// chunkEnv is a Redis of the test's own, its client, a driver keeping
// records on it (replica r1), and a reader of the record of chunkOf's
// chunk (e1 to e16) of task sync.
func chunkEnv(t *testing.T) (*redis.Client, *redisDriver, func() chunkRecord) {
	c := newClient(t, redistest.Start(t).Addr)
	b := recordsDriver(t, c, "r1")
	return c, b, func() chunkRecord { return readRecord(t, c, b, 16) }
}

// recordOf is the record id of chunkOfN's chunk of n: the hash of its
// fields as sent.
func recordOf(n int) string {
	fs := make([]string, n)
	for j := range fs {
		fs[j] = "e" + strconv.Itoa(j+1)
	}
	return chunkHash(strings.Join(fs, " "))
}

// readRecord reads the record of chunkOfN's chunk of n.
func readRecord(t *testing.T, c *redis.Client, b *redisDriver, n int) chunkRecord {
	t.Helper()
	v, err := c.HGet(bg, b.k.entities("sync"), chunkMark+recordOf(n)).Result()
	must(t, "the record", err)
	r, err := decodeChunk(v)
	must(t, "decode the record", err)
	return r
}

// TestChunkRecordsStatusAndUnlock: with records, status sees a chunk's
// leases and last runs in its record, as it sees an entity's in its value;
// an unlock revokes an entity its record holds (detached first), and the
// holder's renewal is told so.
func TestChunkRecordsStatusAndUnlock(t *testing.T) {
	t.Parallel()
	_, b, rec := chunkEnv(t)
	t1 := time.UnixMilli(1796018400000)
	granted := chunkOf(t, b, t1, "a")
	var held []string
	must(t, "Leases", b.Leases(bg, "sync", func(h driver.Held) error {
		expect.True(t, h.Entity+" held by its grant", h.Holder == "r1" && h.Fence == granted[0].Fence && h.Reason == driver.ReasonTick && !h.Revoked)
		held = append(held, h.Entity)
		return nil
	}))
	expect.Equal(t, "leases listed", len(held), 16)
	st, err := b.One(bg, "sync", "e5")
	must(t, "One", err)
	expect.True(t, "e5 alone: held", st.Held != nil && st.Held.Fence == granted[4].Fence && st.Last == nil)
	page := func(search string) []string {
		t.Helper()
		p, err := b.EntityPage(bg, "sync", driver.PageQuery{Search: search, Outcome: "held", Size: 100, MaxScan: 1000})
		must(t, "EntityPage", err)
		var ids []string
		for _, r := range p.Rows {
			ids = append(ids, r.Entity)
		}
		slices.Sort(ids)
		return ids
	}
	expect.Equal(t, "a page of the held", len(page("")), 16)
	expect.Equal(t, "a page of those beginning e1", fmt.Sprint(page("e1")), "[e1 e10 e11 e12 e13 e14 e15 e16]")

	u, ok, err := b.Unlock(bg, "sync", "e5", "op", false)
	must(t, "Unlock", err)
	expect.True(t, "e5 revoked", ok && u.Fence == granted[4].Fence && u.Holder == "r1")
	expect.Equal(t, "e5 detached", rec().Odd, uint32(1<<4))
	lease := func(j int) *driver.Lease {
		return &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j), Token: "a." + strconv.Itoa(j), TTL: time.Minute,
			Reason: driver.ReasonTick, Tick: t1, Fence: granted[j-1].Fence}
	}
	renewed, err := b.Renew(bg, []*driver.Lease{lease(5), lease(6)})
	must(t, "Renew", err)
	expect.Equal(t, "the holder is told", fmt.Sprint(renewed), fmt.Sprint([]driver.Renewal{driver.RenewRevoked, driver.RenewOK}))
	st, err = b.One(bg, "sync", "e5")
	must(t, "One", err)
	expect.True(t, "status says so", st.Held != nil && st.Held.Revoked)

	var args []driver.ReleaseArg
	for j := 1; j <= 16; j++ {
		args = append(args, driver.ReleaseArg{Lease: lease(j), Finished: driver.Finished{Outcome: driver.OutcomeDone, Started: t1, Ended: t1}})
	}
	out, err := b.Release(bg, args)
	must(t, "Release", err)
	for _, r := range out {
		expect.True(t, "released", r.Err == nil)
	}
	runs := map[string]driver.LastRun{}
	must(t, "LastRuns", b.LastRuns(bg, "sync", func(r driver.LastRun) error { runs[r.Entity] = r; return nil }))
	expect.Equal(t, "last runs listed", len(runs), 16)
	expect.True(t, "e6's, from the record", runs["e6"].Outcome == driver.OutcomeDone && runs["e6"].Fence == granted[5].Fence && runs["e6"].Replica == "r1")
	expect.True(t, "e5's, from its value", runs["e5"].Outcome == driver.OutcomeDone && runs["e5"].Fence == granted[4].Fence)
	var still int
	must(t, "Leases", b.Leases(bg, "sync", func(driver.Held) error { still++; return nil }))
	expect.Equal(t, "none held", still, 0)
}

// releaseChunk releases the leases of chunk c1's grant under prefix at
// positions js, their runs done.
func releaseChunk(t *testing.T, b *redisDriver, prefix string, tick time.Time, js ...int) {
	t.Helper()
	var args []driver.ReleaseArg
	for _, j := range js {
		args = append(args, driver.ReleaseArg{Lease: &driver.Lease{Task: "sync", Entity: "e" + strconv.Itoa(j), Token: prefix + "." + strconv.Itoa(j),
			TTL: time.Minute, Reason: driver.ReasonTick, Tick: tick}, Finished: driver.Finished{Outcome: driver.OutcomeDone, Started: tick, Ended: tick}})
	}
	out, err := b.Release(bg, args)
	must(t, "Release", err)
	for _, r := range out {
		expect.True(t, "released", r.Err == nil)
	}
}

// TestChunkRecordsReshard: a reshard moves the entities a chunk's record
// holds as values, held or released as the record says, and leaves no
// record or index behind in any shard.
func TestChunkRecordsReshard(t *testing.T) {
	t.Parallel()
	c, b, _ := chunkEnv(t)
	t1 := time.UnixMilli(1796018400000)
	granted := chunkOf(t, b, t1, "a")
	releaseChunk(t, b, "a", t1, 1, 2, 3, 4, 5, 6, 7, 8)
	_, err := b.Reshard(bg, "sync", 4)
	must(t, "Reshard", err)
	for j := 1; j <= 16; j++ {
		e := "e" + strconv.Itoa(j)
		v, err := c.HGet(bg, b.k.entities(driver.ShardName("sync", driver.ShardOf(e, 4))), e).Result()
		must(t, e+" in its shard", err)
		ev, err := decodeEntity(v)
		must(t, "decode "+e, err)
		if j <= 8 {
			expect.True(t, e+" released, its run done", ev.Token == "" && ev.Last != nil && ev.Last.Outcome == driver.OutcomeDone && ev.Fence == granted[j-1].Fence)
		} else {
			expect.True(t, e+" held by its grant", ev.Token == "a."+strconv.Itoa(j) && ev.Fence == granted[j-1].Fence && ev.Holder == "r1")
		}
	}
	for s := range 4 {
		fs, err := c.HKeys(bg, b.k.entities(driver.ShardName("sync", s))).Result()
		must(t, "HKEYS", err)
		for _, f := range fs {
			expect.True(t, "no record or index left: "+f, !strings.HasPrefix(f, chunkMark) && !strings.HasPrefix(f, indexMark))
		}
	}
}

// TestChunkRecordsSweep: the sweep deletes a chunk's record once its grant
// is over and untouched within the state TTL, then the index fields that
// named it; a record whose grant holds its entities stays.
func TestChunkRecordsSweep(t *testing.T) {
	t.Parallel()
	c, b, _ := chunkEnv(t)
	b.Configure(driver.Config{Replica: "r1", StateTTL: time.Millisecond, MaxTTL: func() time.Duration { return 5 * time.Second }})
	t1 := time.UnixMilli(1796018400000)
	chunkOf(t, b, t1, "a")
	h := b.k.entities("sync")
	must(t, "Sweep", b.Sweep(bg))
	n, err := c.HLen(bg, h).Result()
	must(t, "HLEN", err)
	expect.Equal(t, "held: the record and its index stay", n, int64(18))
	releaseChunk(t, b, "a", t1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	expect.WaitFor(t, 5*time.Second, "the record and its index swept", func() bool {
		must(t, "Sweep", b.Sweep(bg))
		n, err := c.HLen(bg, h).Result()
		must(t, "HLEN", err)
		return n == 1 // the task's mark: it kept records
	})
}

// TestRecordsByLayout: a driver keeps a tick's chunks as records on a
// Redis of this layout (one new to tickd gets it), never on one of layout
// 2, which a tickd that does not read records may share; Migrate moves a
// layout-2 Redis to this layout only when no replica runs on it.
func TestRecordsByLayout(t *testing.T) {
	t.Parallel()
	newDriver := func(c *redis.Client, replica string) *redisDriver {
		d, err := New(c, "ck", driver.AcksNever)
		must(t, "New", err)
		b := d.(*redisDriver)
		b.Configure(driver.Config{Replica: replica, MaxTTL: func() time.Duration { return 5 * time.Second }})
		must(t, "InitEpoch", b.InitEpoch(bg))
		return b
	}
	hasRecord := func(c *redis.Client, b *redisDriver) bool {
		n, err := c.HExists(bg, b.k.entities("sync"), chunkMark+recordOf(16)).Result()
		must(t, "HEXISTS", err)
		return n
	}
	fresh := newClient(t, redistest.Start(t).Addr)
	b := newDriver(fresh, "r1")
	chunkOf(t, b, time.UnixMilli(1796018400000), "a")
	expect.Equal(t, "a new Redis's layout", fresh.Get(bg, "ck:layout").Val(), LayoutVersion)
	expect.True(t, "its chunk a record", hasRecord(fresh, b))
	// The layout key lost with the data (a Redis restarted empty): the
	// driver keeps records, and writes the key back. Forgetting them made
	// duplicate tick runs and overlaps in TestRedisRestartedEmpty.
	b.SetLayoutRecheck(time.Millisecond)
	must(t, "DEL", fresh.Del(bg, "ck:layout").Err())
	expect.WaitFor(t, 5*time.Second, "the layout key written back", func() bool {
		must(t, "ready", b.ready(bg))
		return fresh.Get(bg, "ck:layout").Val() == LayoutVersion
	})
	expect.True(t, "records kept", b.records.Load())

	old := newClient(t, redistest.Start(t).Addr)
	must(t, "layout 2", old.Set(bg, "ck:layout", layoutNoRecords, 0).Err())
	b = newDriver(old, "r1")
	chunkOf(t, b, time.UnixMilli(1796018400000), "a")
	expect.True(t, "on layout 2, no record", !hasRecord(old, b))
	releaseChunk(t, b, "a", time.UnixMilli(1796018400000), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
	must(t, "Announce", b.Announce(bg, driver.Announcement{Tasks: []string{"sync"}, Process: "p1"}, 300*time.Millisecond))
	_, err := b.Migrate(bg)
	expect.True(t, fmt.Sprintf("Migrate with a replica running: %v", err), errors.Is(err, ErrReplicasRunning))
	expect.Equal(t, "layout kept", old.Get(bg, "ck:layout").Val(), layoutNoRecords)
	expect.WaitFor(t, 5*time.Second, "the replica's announcement over", func() bool {
		live, err := b.liveReplicas(bg)
		must(t, "liveReplicas", err)
		return len(live) == 0
	})
	m, err := b.Migrate(bg)
	must(t, "Migrate", err)
	expect.Equal(t, "layout moved", old.Get(bg, "ck:layout").Val(), LayoutVersion)
	expect.Equal(t, "moved from", m.From, layoutNoRecords)
	b = newDriver(old, "r2")
	chunkOf(t, b, time.UnixMilli(1796018460000), "b")
	expect.True(t, "then its chunk a record", hasRecord(old, b))
}
