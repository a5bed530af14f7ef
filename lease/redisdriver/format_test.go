package redisdriver

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/lease/driver"
)

// codecScript runs lib.lua's codecs: ARGV format, "decode" or "encode", and
// the value (encoded, or the fields as a JSON object). decode answers the
// fields as a JSON object, or nil when the value is not understood.
var codecScript = testScript(`
local codecs = {
  entity = {decode_entity, encode_entity}, run = {decode_run, encode_run},
  due = {decode_due, encode_due}, epoch = {decode_epoch, encode_epoch},
  from = {decode_from}, next = {decode_next}, announce = {decode_announce, encode_announce},
  busy = {nil, reply_busy},
}
local c = codecs[ARGV[1]]
if ARGV[2] == 'decode' then
  local t = c[1](ARGV[3])
  if not t then return nil end
  if ARGV[1] == 'entity' then t.last, t.src, t.last_at = last_of(t), nil, nil end
  return cjson.encode(t)
end
return c[2](cjson.decode(ARGV[3]))
`)

// luaCodec calls codecScript.
type luaCodec struct {
	t *testing.T
	c *redis.Client
}

func (l luaCodec) decode(format, v string) (map[string]string, bool) {
	l.t.Helper()
	res, err := codecScript.Run(bg, l.c, nil, format, "decode", v).Text()
	if errors.Is(err, redis.Nil) {
		return nil, false
	}
	if err != nil {
		l.t.Fatalf("lua decode_%s(%q): %v", format, v, err)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(res), &m); err != nil {
		l.t.Fatalf("lua decode_%s(%q) answered %q: %v", format, v, res, err)
	}
	return m, true
}

func (l luaCodec) encode(format string, fields map[string]string) string {
	l.t.Helper()
	js, _ := json.Marshal(fields)
	res, err := codecScript.Run(bg, l.c, nil, format, "encode", string(js)).Text()
	if err != nil {
		l.t.Fatalf("lua encode_%s(%s): %v", format, js, err)
	}
	return res
}

// itoa is how a number is stored.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The fields of each Go value as Lua's table names them: this is the check
// that both sides agree on names, order and the form of each field.

func entityFields(e entityValue) map[string]string {
	last := ""
	if e.Last != nil {
		last = e.Last.encode()
	}
	return map[string]string{"last_tick": itoa(e.LastTick), "fence": itoa(e.Fence), "token": e.Token,
		"exp": itoa(e.Exp), "fu": cmp.Or(e.FollowUp, "0"), "touched": itoa(e.Touched), "reason": string(e.Reason),
		"tick": itoa(e.Tick), "holder": driver.Escape(e.Holder), "last": last}
}

func runFields(r runRecord) map[string]string {
	return map[string]string{"outcome": string(r.Outcome), "start": itoa(r.Start), "end": itoa(r.End),
		"fence": itoa(r.Fence), "reason": string(r.Reason), "replica": driver.Escape(r.Replica), "error": driver.Escape(r.Error)}
}

func dueFields(d dueInfo) map[string]string {
	return map[string]string{"reason": string(d.Reason), "attempt": itoa(d.Attempt), "tick": itoa(d.Tick),
		"reqs": strings.Join(d.Reqs, ","), "claim": d.Claim}
}

const hostile = "a|b#c d%\x00{}:*\n\"'\\é"

var (
	maxMS  = int64(math.MaxInt64)
	fullRR = runRecord{Outcome: driver.OutcomeLeaseLost, Start: maxMS, End: maxMS, Fence: maxMS, Reason: driver.ReasonReschedule, Replica: hostile}
)

// TestCodecsAgree puts the same values through format.go's codecs and
// lib.lua's, on a real Redis: Lua decodes what Go encodes into the same
// named fields, and encodes those fields into the same string. The values
// include empty fields, hostile ids and the largest numbers.
func TestCodecsAgree(t *testing.T) {
	srv := redistest.Start(t)
	lua := luaCodec{t, newClient(t, srv.Addr)}

	entities := []entityValue{
		{},
		{LastTick: 1_700_000_000_000, Fence: 1_700_000_000_000_123, Token: "0123abcd-1z", Exp: 1_700_000_060_000,
			FollowUp: "1", Touched: 1_700_000_000_001, Reason: driver.ReasonTick, Tick: 1_700_000_000_000, Holder: "host-42",
			Last: &runRecord{Outcome: driver.OutcomeDone, Start: 1, End: 2, Fence: 3, Reason: driver.ReasonTrigger, Replica: "r"}},
		{LastTick: maxMS, Fence: maxMS, Token: "t", Exp: maxMS, Touched: maxMS, Reason: driver.ReasonQueued, Tick: maxMS,
			Holder: hostile, Last: &fullRR},
		{Last: &runRecord{}},
	}
	for _, e := range entities {
		checkCodec(t, lua, "entity", e, e.encode(), entityFields(e), decodeEntity)
	}
	for _, r := range []runRecord{{}, fullRR, {Outcome: driver.OutcomeUnlocked, Start: 5, End: 6, Fence: 7, Reason: driver.ReasonTick, Replica: "cli:ops@host"},
		{Outcome: driver.OutcomeFailed, Start: 5, End: 6, Fence: 7, Reason: driver.ReasonTick, Replica: "r", Error: hostile}} {
		checkCodec(t, lua, "run", r, r.encode(), runFields(r), decodeRun)
	}
	for _, d := range []dueInfo{{}, {Reason: driver.ReasonRetry, Attempt: 3, Tick: maxMS, Claim: "nonce-12:7"}, {Reason: driver.ReasonTrigger, Reqs: []string{"0a1b", "c-2"}, Claim: "a|b"}} {
		checkCodec(t, lua, "due", d, d.encode(), dueFields(d), decodeDueInfo)
	}
	for _, ep := range []epochValue{{}, {QuarantineUntil: maxMS, LostAt: 1_700_000_000_000}, {LostAt: 1, Run: "b98bf76521e6f74e51f21f0c74bb15ea9bf9cafb"},
		{Run: "ab", Successors: []string{"cd", "ef01"}}} {
		fields := map[string]string{"quarantine_until": itoa(ep.QuarantineUntil), "lost_at": itoa(ep.LostAt), "run": ep.Run, "successors": strings.Join(ep.Successors, ",")}
		checkCodec(t, lua, "epoch", ep, ep.encode(), fields, nil)
	}

	codecsAgreeOnArguments(t, lua)

	// Acquire's busy answer, written by Lua, read by Go.
	busy := entityValue{Touched: 1_700_000_000_001, Fence: maxMS, Holder: hostile}
	rep, err := decodeAcquireReply(lua.encode("busy", entityFields(busy)))
	if err != nil {
		t.Fatalf("busy reply: %v", err)
	}
	expect.Equal(t, "busy reply's status", rep.Status, driver.GrantBusy)
	expect.Equal(t, "busy reply's fence", rep.Fence, busy.Fence)
	expect.Equal(t, "busy reply's holder", rep.Holder, hostile)
	expect.True(t, "busy reply's since is the grant's", rep.At.Equal(driver.MSTime(busy.Touched)))

	badValuesRefused(t, lua)
}

// checkCodec holds one value's Go encoding (enc) against lib.lua: Lua
// decodes enc into fields and encodes fields into enc; Go decodes enc back
// into v (when decode is given).
func checkCodec[T any](t *testing.T, lua luaCodec, format string, v T, enc string, fields map[string]string, decode func(string) (T, error)) {
	t.Helper()
	if got, ok := lua.decode(format, enc); !ok || !reflect.DeepEqual(got, fields) {
		t.Errorf("%s %q:\n lua decodes %v (understood: %v)\n  go fields %v", format, enc, got, ok, fields)
	}
	if le := lua.encode(format, fields); le != enc {
		t.Errorf("%s: lua encodes %q, go %q", format, le, enc)
	}
	if decode == nil {
		return
	}
	if back, err := decode(enc); err != nil || !reflect.DeepEqual(back, v) {
		t.Errorf("%s %q: go decodes %+v, %v; want %+v", format, enc, back, err, v)
	}
}

// TestLuaConstantsArePlain: the constants handed to the scripts are quoted
// without escaping, so they must need none.
func TestLuaConstantsArePlain(t *testing.T) {
	line := regexp.MustCompile(`^local [A-Z_]+ = ('[a-z_0-9!%#@]*'|\d+(\.\d+)?)$`)
	for _, l := range strings.Split(luaConstants(nil), "\n") {
		if l != "" && !line.MatchString(l) {
			t.Errorf("constant line %q", l)
		}
	}
	if want := "local EARLY_MS = " + itoa(driver.EarlyTolerance.Milliseconds()) + "\n"; !strings.Contains(luaConstants(nil), want) {
		t.Errorf("EARLY_MS is not driver.EarlyTolerance (%v)", driver.EarlyTolerance)
	}
}

// fastScript runs lib.lua's grant_fast or release_fast on a value, and the
// same step through decode_entity and encode_entity as acquire.lua and
// release.lua take it, and answers both: "nil" where a path does not apply.
var fastScript = testScript(`
local v, now, now_ms = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now_s, now_ms_s = num(now), num(now_ms)
local token, last = ARGV[5], ARGV[6]
local tick_s, exp_s = ARGV[7], num(now_ms + 5000)
local reason, holder, run_tick, tsfx = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local tick = tonumber(tick_s)
local floor_s = ARGV[12]
if floor_s == '0' or tick == 0 then floor_s = tick_s end
local floor = tonumber(floor_s)
local fast, slow = 'nil', 'nil'
local e = entity(v)
if ARGV[1] == 'grant' then
  -- token .. tsfx is the whole token: a chunk's prefix and its position, or
  -- a token alone and ''; grant_fast gets them between separators.
  local a, b = grant_fast_for(tick, tick_s, floor_s, now_s, now_ms_s, exp_s, reason, holder)(v, '|' .. token, tsfx .. '|', run_tick)
  if a == 'ran' then fast = 'ran ' .. b elseif a then fast = a .. ' ' .. b end
  if ran_before(e, floor) then
    slow = 'ran ' .. e.last_tick
  elseif not is_held(e, now_ms) then
    local fence = grant(e, now, now_s, now_ms_s, tick, tick_s, token .. tsfx, exp_s, reason, run_tick, holder)
    slow = encode_entity(e) .. ' ' .. fence
  end
else
  fast = release_fast_for(now_ms_s)(v, '|' .. token .. '|', last) or 'nil'
  if e.token == token and is_held(e, now_ms) and e.fu ~= '1' then
    release(e, now_ms_s, last)
    slow = encode_entity(e)
  end
end
return {fast, slow}
`)

// TestFastPathsAgree holds acquire's and release's fast paths (lib.lua's
// grant_fast and release_fast, which read a value by its separators) to
// the codec: wherever a fast path answers, it answers what decoding and
// encoding would have; it leaves alone what it cannot read.
func TestFastPathsAgree(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	const now, nowMS = 1_700_000_000_000_000, 1_700_000_000_000
	rr := fullRR.encode()
	values := []entityValue{
		{Last: &runRecord{}},
		{LastTick: nowMS - 10_000, Fence: now - 5, Touched: nowMS - 1, Last: &fullRR},
		{LastTick: nowMS - 10_000, Fence: now + 7, Token: "tok", Exp: nowMS + 1000, Touched: nowMS - 1, Reason: driver.ReasonTick, Tick: nowMS - 10_000, Holder: "h|x", Last: &fullRR},
		{LastTick: nowMS - 10_000, Fence: now - 5, Token: "tok", Exp: nowMS - 1, Touched: nowMS - 1, Reason: driver.ReasonRetry, Holder: hostile, Last: &fullRR},
		{LastTick: nowMS, Fence: 12, Token: "tok", Exp: nowMS + 1000, FollowUp: "1", Touched: 1, Reason: driver.ReasonQueued, Tick: 5, Holder: "h", Last: &fullRR},
		{LastTick: nowMS, Fence: 12, FollowUp: "1", Touched: 1},
		{LastTick: nowMS - 10_000, Fence: now, Touched: nowMS - 1, Last: &fullRR},
		{LastTick: maxMS, Fence: maxMS, Token: "tok", Exp: maxMS, Touched: maxMS, Reason: driver.ReasonQueued, Tick: maxMS, Holder: hostile, Last: &fullRR},
	}
	var raw []string
	for _, v := range values {
		raw = append(raw, v.encode())
	}
	// An empty follow-up flag, and values neither path can read.
	raw = append(raw, "1|2|tok|"+itoa(nowMS+1000)+"||3|tick|4|h#", "", "x", "1|2|3", "1|2|3|4|5|6|7|8|9")
	// How a grant is asked for: a tick run, a run carrying a due entry's
	// tick (a retry, a queued run: tick 0, run_tick the entry's), another
	// holder; the token alone, or a chunk's (its prefix and a position).
	type grantArgs struct{ reason, holder, runTick, tsfx string }
	asks := []grantArgs{{"tick", "me", "", ""}, {"retry", "other-replica", itoa(nowMS - 20_000), ""},
		{"queued", hostile, itoa(maxMS), ""}, {"tick", "me", "", ".7"}, {"tick", "r2", "", ".16"}}
	applied := map[string]int{}
	for _, v := range raw {
		for _, tf := range [][2]int64{{0, 0}, {nowMS - 10_000, 0}, {nowMS, 0}, {nowMS + 10, 0}, {nowMS, nowMS - 10_000}, {nowMS + 10, nowMS - 5}, {nowMS, nowMS - 15_000}} {
			tick, floor := tf[0], tf[1] // a floor (Request.Floor) or none (0)
			for _, token := range []string{"tok", "other"} {
				for k, op := range []string{"grant", "release", "grant", "grant", "grant", "grant"} {
					a := asks[0]
					if op == "grant" && k >= 2 {
						a = asks[k-1]
					}
					runTick := a.runTick
					if runTick == "" {
						runTick = itoa(tick)
					}
					res, err := fastScript.Run(bg, c, nil, op, v, now, nowMS, token, rr, tick, a.reason, driver.Escape(a.holder), runTick, a.tsfx, floor).StringSlice()
					if err != nil {
						t.Fatalf("%s %q: %v", op, v, err)
					}
					fast, slow := res[0], res[1]
					if fast != "nil" && fast != slow {
						t.Errorf("%s of %q (tick %d, floor %d, token %s%s, %+v): fast path %q, codec %q", op, v, tick, floor, token, a.tsfx, a, fast, slow)
					}
					if fast != "nil" {
						applied[op]++
					}
					if decodeErr := func() error { _, err := decodeEntity(v); return err }(); decodeErr != nil && fast != "nil" {
						t.Errorf("%s of %q, a value the codec cannot read: fast path answered %q", op, v, fast)
					}
				}
			}
		}
	}
	// Both paths were taken, so the comparison above compared something.
	if applied["grant"] < 10 || applied["release"] < 3 {
		t.Fatalf("fast paths taken: %v", applied)
	}
}

// TestSplitReply: a script's answers split at spaces, "x*N" standing for N
// answers x; a count that is not one stays as it is, for the decoder to
// refuse.
func TestSplitReply(t *testing.T) {
	over := "a*" + strconv.Itoa(maxRepeat+1)
	for in, want := range map[string][]string{
		"12 ran|5*3 busy|1|2|r": {"12", "ran|5", "ran|5", "ran|5", "busy|1|2|r"},
		"ok":                    {"ok"},
		"ran|5*0 a*x b*":        {"ran|5*0", "a*x", "b*"},
		over:                    {over},
	} {
		if got := splitReply(in); !slices.Equal(got, want) {
			t.Errorf("splitReply(%q) = %q, want %q", in, got, want)
		}
	}
}

// codecsAgreeOnArguments: announcements (an older tickd's too), a due
// entry's origin and a release's next run, as Lua decodes them.
func codecsAgreeOnArguments(t *testing.T, lua luaCodec) {
	t.Helper()
	for _, a := range []driver.Announcement{{Until: 1, Tasks: nil}, {Until: maxMS, Tasks: []string{"sync-users", hostile},
		Process: "0123456789abcdef", Host: hostile, Version: "v1.2.3 (" + hostile + ")", Since: maxMS - 1, Seen: maxMS}} {
		checkCodec(t, lua, "announce", a, encodeAnnounce(a), map[string]string{"until_ms": itoa(a.Until), "tasks": announceTasks(a),
			"process": a.Process, "host": driver.Escape(a.Host), "version": driver.Escape(a.Version), "since_ms": itoa(a.Since), "seen_ms": itoa(a.Seen)}, decodeAnnounce)
	}
	// An announcement of a tickd before the process fields.
	if got, ok := lua.decode("announce", "5|a%20b c"); !ok || fmt.Sprint(got) != "map[host: process: seen_ms:0 since_ms:0 tasks:a%20b c until_ms:5 version:]" {
		t.Errorf("lua decodes an older announcement as %v (%v)", got, ok)
	}
	if a, err := decodeAnnounce("5|a%20b c"); err != nil || a.Until != 5 || fmt.Sprint(a.Tasks) != "[a b c]" || a.Process != "" {
		t.Errorf("go decodes an older announcement as %+v, %v", a, err)
	}

	for _, f := range []dueFrom{{Claim: "nonce-1:2", Tick: 0}, {Claim: "c", Tick: maxMS, Reqs: []string{"r1", "r2"}}} {
		want := map[string]string{"claim": f.Claim, "tick": itoa(f.Tick), "reqs": strings.Join(f.Reqs, ",")}
		if got, ok := lua.decode("from", f.encode()); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("from %q: lua decodes %v (%v), want %v", f.encode(), got, ok, want)
		}
	}
	for _, n := range []nextRun{{Reason: driver.ReasonRetry, DelayMS: 0, Attempt: 0}, {Reason: driver.ReasonReschedule, DelayMS: maxMS, Attempt: 100, Carry: true}} {
		want := map[string]string{"reason": string(n.Reason), "delay_ms": itoa(n.DelayMS), "attempt": itoa(n.Attempt), "carry": flag(n.Carry)}
		if got, ok := lua.decode("next", n.encode()); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("next %q: lua decodes %v (%v), want %v", n.encode(), got, ok, want)
		}
	}
}

// badValuesRefused: what neither side understands is refused by both.
func badValuesRefused(t *testing.T, lua luaCodec) {
	t.Helper()
	for format, v := range map[string]string{"entity": "1|2|3", "run": "done|1|2", "due": "retry|1", "epoch": "12", "from": "c|x", "next": "retry|1|2|x"} {
		if got, ok := lua.decode(format, v); ok {
			t.Errorf("lua decodes a bad %s %q as %v", format, v, got)
		}
	}
	for _, v := range []string{"1|2|3", "x|2||4|0|6|tick|8|h#", "1|2||4|0|6|tick|8|h#done|1"} {
		if _, err := decodeEntity(v); !errors.Is(err, errFormat) {
			t.Errorf("go decodes a bad entity %q: %v", v, err)
		}
	}
}
