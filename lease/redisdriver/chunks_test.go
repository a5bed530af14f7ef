package redisdriver

import (
	"encoding/json"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// chunkScript runs lua/chunk.lua: ARGV "decode" and a record (answered as
// a JSON object, nil when not understood), "encode" and the fields as a
// JSON object, or "detach", the hash and a field (answered 1 when it moved
// the field's state).
var chunkScript = testScript(luaFile("chunk") + `
if ARGV[1] == 'decode' then
  local c = decode_chunk(ARGV[2])
  if not c then return nil end
  return cjson.encode(c)
elseif ARGV[1] == 'encode' then
  return encode_chunk(cjson.decode(ARGV[2]))
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
// and the largest numbers; neither understands a record cut short.
func TestChunkCodecsAgree(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Addr)
	for _, rec := range []chunkRecord{
		{},
		{Tick: 1796018400000, Fence: 1796018409910403, Holder: hostile, Prefix: "k3x.", Exp: maxMS, Held: 0xffff, Odd: 0x8001, Since: maxMS, Ended: maxMS},
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
	short := "1|2|h|p.|3|4|5|6"
	_, err := decodeChunk(short)
	expect.True(t, "Go refuses a record cut short", err != nil)
	_, err = chunkScript.Run(bg, c, nil, "decode", short).Text()
	expect.True(t, "Lua refuses it too", err != nil)
	for _, bad := range []string{"", "id", "id:0", "id:17", "id:01", ":3"} {
		_, err := decodeIndex(bad)
		expect.True(t, "an index "+bad+" is refused", err != nil)
	}
	x, err := decodeIndex(chunkIndex{"abc", 16}.encode())
	must(t, "an index's round trip", err)
	expect.Equal(t, "the index", x, chunkIndex{"abc", 16})
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
		indexMark+"new", chunkIndex{"c1", 3}.encode(), indexMark+"odd", chunkIndex{"c1", 4}.encode(),
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
	for _, f := range []string{"held", "done", "new"} {
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
	expect.Same(t, "odd", value("odd"), odd)
	expect.Same(t, "alone", value("alone"), old)
	v, err := c.HGet(bg, h, chunkMark+"c1").Result()
	must(t, "the record", err)
	after, err := decodeChunk(v)
	must(t, "decode the record", err)
	want := rec
	want.Held, want.Odd = 0, 0b1111
	expect.Equal(t, "the record after", after, want)
}

// must stops the test at err, naming what failed.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
