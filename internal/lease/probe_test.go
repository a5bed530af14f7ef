package lease

// Probes of a hot path that does no per-entity script work in a tick's
// common case (every entity free, its last run the tick before, nothing
// asked for it): what Redis's CPU a run would be when a batch's grant is
// one record and each entity a bit, against today's scripts in the same
// run. Neither is the store's code: each is the common case alone, its
// keys fixed, to measure before the store is changed (docs/performance.md,
// "Speed II"). Run them with the lease benchmark's ticks:
//
//	go test -c -o /tmp/lease.test ./internal/lease
//	cd internal/lease && /tmp/lease.test -test.run XXX -test.bench 'BenchmarkAcquireRelease$/ticks$' -test.benchtime 200000x
//	/tmp/lease.test -test.run XXX -test.bench 'BenchmarkProbe' -test.benchtime 4x
//
// BenchmarkProbeChunks is the design chosen (a record per chunk of the
// tick's stream, docs/performance.md); the other two are the bitmaps'.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tickd/tickd/internal/testkit/redistest"
)

// probeFence is the batch's fence: Redis's time in µs, above every fence
// the task granted before (KEYS[1]).
const probeFence = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local hwm = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = now
if fence <= hwm then fence = hwm + 1 end
redis.call('SET', KEYS[1], fence)
`

// probeBitsGrant grants a batch by its entities' numbers: the tick's run
// bits and the busy bits set in two BITFIELDs (the old bits say which were
// run or held: undone for those), one record for the batch.
const probeBitsGrant = probeFence + `
local ran = redis.call('BITFIELD', KEYS[2], unpack(ARGV, 5))
local busy = redis.call('BITFIELD', KEYS[3], unpack(ARGV, 5))
local ub, ur, out = {}, {}, {}
for i = 1, #ran do
  local r, b = ran[i], busy[i]
  if r == 1 and b == 0 then
    local k = #ub
    ub[k+1], ub[k+2], ub[k+3], ub[k+4] = 'SET', 'u1', ARGV[4 + 4*i - 1], 0
    out[#out+1] = i
  elseif b == 1 and r == 0 then
    local k = #ur
    ur[k+1], ur[k+2], ur[k+3], ur[k+4] = 'SET', 'u1', ARGV[4 + 4*i - 1], 0
    out[#out+1] = -i
  end
end
if #ub > 0 then redis.call('BITFIELD', KEYS[3], unpack(ub)) end
if #ur > 0 then redis.call('BITFIELD', KEYS[2], unpack(ur)) end
redis.call('HSET', KEYS[4], ARGV[2], fence .. '|' .. ARGV[1] .. '|' .. ARGV[3] .. '|' .. #ran .. '|' .. ARGV[4])
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[6], ARGV[2], #ran)
return {fence, out}
`

// probeBitsRelease clears a release batch's busy bits in one BITFIELD.
const probeBitsRelease = `
redis.call('BITFIELD', KEYS[1], unpack(ARGV, 3))
local left = redis.call('HINCRBY', KEYS[3], ARGV[1], -tonumber(ARGV[2]))
if left <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
return left
`

// BenchmarkProbeBits is a tick of 100,000 entities granted 256 at a time
// (probeBitsGrant) and released 140 at a time, the end-to-end benchmark's
// mean release batch; each iteration a tick.
func BenchmarkProbeBits(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	ctx := context.Background()
	g, r := redis.NewScript(probeBitsGrant), redis.NewScript(probeBitsRelease)
	const pool, batch = 100_000, 256
	keys := func(T int) []string {
		return []string{"{t}:hwm", "{t}:ran:" + strconv.Itoa(T), "{t}:busy", "{t}:grants", "{t}:exp", "{t}:left"}
	}
	tick := func(T int) {
		for lo := 0; lo < pool; lo += batch {
			args := []any{"replica-0123456789", "tok" + strconv.Itoa(T) + ":" + strconv.Itoa(lo), strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10)}
			var packed strings.Builder
			var bits []any
			for i := lo; i < min(lo+batch, pool); i++ {
				packed.WriteString(strconv.Itoa(i))
				packed.WriteByte(',')
				bits = append(bits, "SET", "u1", "#"+strconv.Itoa(i), 1)
			}
			args = append(args, packed.String())
			args = append(args, bits...)
			res, err := g.Run(ctx, c, keys(T), args...).Slice()
			if err != nil {
				b.Fatal(err)
			}
			if ex := res[1].([]any); len(ex) > 0 {
				b.Fatalf("exceptions %v", ex[:min(5, len(ex))])
			}
			// Releases come back in batches of ~140 (the e2e's mean).
			for rl := lo; rl < min(lo+batch, pool); rl += 140 {
				hi := min(rl+140, lo+batch, pool)
				rargs := []any{args[1], hi - rl}
				for i := rl; i < hi; i++ {
					rargs = append(rargs, "SET", "u1", "#"+strconv.Itoa(i), 0)
				}
				if err := r.Run(ctx, c, []string{"{t}:busy", "{t}:grants", "{t}:left", "{t}:exp"}, rargs...).Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	probeTicks(b, c, pool, tick)
}

// probeMaskLib reads and writes a chunk of 256 entity numbers' bits as
// eight 32-bit words.
const probeMaskLib = `
local function words(s)
  if #s < 32 then s = s .. string.rep('\0', 32 - #s) end
  return {struct.unpack('>I4I4I4I4I4I4I4I4', s)}
end
local function pack(w)
  return struct.pack('>I4I4I4I4I4I4I4I4', w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8])
end
`

// probeMaskGrant grants the entities of one chunk of 256 numbers, given
// as a 32-byte mask: refused if any is held, run this tick or odd (state
// of its own, for the per-entity path), else their bits set, one record.
const probeMaskGrant = probeMaskLib + `
local off = tonumber(ARGV[4])
local m = words(ARGV[5])
local b = words(redis.call('GETRANGE', KEYS[3], off, off + 31))
local r = words(redis.call('GETRANGE', KEYS[2], off, off + 31))
local o = words(redis.call('GETRANGE', KEYS[7], off, off + 31))
local clash = false
for i = 1, 8 do
  if bit.band(bit.bor(b[i], r[i], o[i]), m[i]) ~= 0 then clash = true end
end
if clash then return {0, 'clash'} end
` + probeFence + `
if #redis.call('ZRANGEBYSCORE', KEYS[5], 0, math.floor(now / 1000), 'LIMIT', 0, 4) > 0 then
  return {0, 'sweep'} -- an expired grant's entities to free first (none in the probe)
end
for i = 1, 8 do b[i] = bit.bor(b[i], m[i]); r[i] = bit.bor(r[i], m[i]) end
redis.call('SETRANGE', KEYS[3], off, pack(b))
redis.call('SETRANGE', KEYS[2], off, pack(r))
redis.call('HSET', KEYS[4], ARGV[2], fence .. '|' .. ARGV[1] .. '|' .. ARGV[3] .. '|' .. off .. '|' .. ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[2])
return {fence, 'ok'}
`

// probeMaskRelease releases a mask of a grant's entities: the busy bits
// the grant still holds cleared, the grant's own mask kept for the rest.
const probeMaskRelease = probeMaskLib + `
local g = redis.call('HGET', KEYS[2], ARGV[1])
if not g then return 'gone' end
local q = 0
for _ = 1, 3 do q = string.find(g, '|', q + 1, true) end
local p = string.find(g, '|', q + 1, true)
local off, held = tonumber(string.sub(g, q + 1, p - 1)), words(string.sub(g, p + 1))
local m = words(ARGV[2])
local b = words(redis.call('GETRANGE', KEYS[1], off, off + 31))
local left = 0
for i = 1, 8 do
  local mine = bit.band(held[i], m[i])
  b[i] = bit.band(b[i], bit.bnot(mine))
  held[i] = bit.band(held[i], bit.bnot(mine))
  left = bit.bor(left, held[i])
end
redis.call('SETRANGE', KEYS[1], off, pack(b))
if left == 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], string.sub(g, 1, p) .. pack(held))
end
return 'ok'
`

// mask is the 32-byte mask of positions [lo, hi) of a chunk.
func mask(lo, hi int) string {
	var m [32]byte
	for i := lo; i < hi; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return string(m[:])
}

// probeMaskRenew renews a grant: its expiry in its record and in the
// expiry index, one call a grant however many runs it holds.
const probeMaskRenew = `
local g = redis.call('HGET', KEYS[1], ARGV[1])
if not g then return 0 end
local p1 = string.find(g, '|', 1, true)
local p2 = string.find(g, '|', p1 + 1, true)
local p3 = string.find(g, '|', p2 + 1, true)
redis.call('HSET', KEYS[1], ARGV[1], string.sub(g, 1, p2) .. ARGV[2] .. string.sub(g, p3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
`

// BenchmarkProbeMask is BenchmarkProbeBits by chunk masks, each grant
// renewed once (a run's renewal is the grant's: runs shorter than a third
// of the lease's TTL, as here, renew none).
func BenchmarkProbeMask(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	ctx := context.Background()
	g, r, renew := redis.NewScript(probeMaskGrant), redis.NewScript(probeMaskRelease), redis.NewScript(probeMaskRenew)
	const pool, batch = 100_000, 256
	tick := func(T int) {
		keys := []string{"{t}:hwm", "{t}:ran:" + strconv.Itoa(T), "{t}:busy", "{t}:grants", "{t}:exp", "{t}:left", "{t}:odd"}
		for lo := 0; lo < pool; lo += batch {
			n := min(batch, pool-lo)
			tok := "tok" + strconv.Itoa(T) + ":" + strconv.Itoa(lo)
			res, err := g.Run(ctx, c, keys, "replica-0123456789", tok, strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10), lo/8, mask(0, n)).Slice()
			if err != nil {
				b.Fatal(err)
			}
			if res[1] != "ok" {
				b.Fatalf("grant: %v", res)
			}
			if err := renew.Run(ctx, c, []string{"{t}:grants", "{t}:exp"}, tok, strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10)).Err(); err != nil {
				b.Fatal(err)
			}
			for rl := 0; rl < n; rl += 140 {
				if err := r.Run(ctx, c, []string{"{t}:busy", "{t}:grants", "{t}:exp"}, tok, mask(rl, min(rl+140, n))).Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	probeTicks(b, c, pool, tick)
}

// probeTicks runs tick 0, then one tick an iteration, and reports Redis's
// CPU a run over those: each tick runs pool entities.
func probeTicks(b *testing.B, c *redis.Client, pool int, tick func(T int)) {
	tick(0)
	b.ResetTimer()
	cpu0 := redistest.MainThreadCPU(b, c)
	n := 0
	for T := 1; b.Loop(); T++ {
		tick(T)
		n += pool
	}
	b.ReportMetric((redistest.MainThreadCPU(b, c)-cpu0)/float64(n), "redis-µs/run")
}

// probeChunkGrant grants whole chunks of 16 entities of a tick's stream,
// each kept as one record in the task's hash (its tick, fence, holder,
// token prefix, expiry, held and odd masks): one HMGET and one HSET for
// the batch's chunks, nothing per entity. ARGV: tick, holder, expiry (ms),
// then a pair per chunk: its id, its token prefix.
const probeChunkGrant = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local top = tonumber(redis.call('HGET', KEYS[2], 'top') or '0')
local fence = now
if fence <= top then fence = top + 1 end
local tick, holder, exp = ARGV[1], ARGV[2], ARGV[3]
local fence_s = string.format('%.0f', fence)
local fs, n = {}, (#ARGV - 3) / 2
for c = 1, n do
  redis.call('SADD', KEYS[3], ARGV[2 + 2 * c])
  fs[c] = '#' .. ARGV[2 + 2 * c]
end
local recs = redis.call('HMGET', KEYS[1], unpack(fs))
local w, now_ms = {}, math.floor(now / 1000)
for c = 1, n do
  local r = recs[c]
  if r then
    local rt, rexp, held, odd = string.match(r, '^(%d+)|%d+|[^|]*|[^|]*|(%d+)|(%d+)|(%d+)$')
    if tonumber(rt) >= tonumber(tick) then return {0, 'ran'} end
    if held ~= '0' and tonumber(rexp) > now_ms or odd ~= '0' then return {0, 'clash'} end
  end
  w[2 * c - 1], w[2 * c] = fs[c], tick .. '|' .. fence_s .. '|' .. holder .. '|' .. ARGV[3 + 2 * c] .. '|' .. exp .. '|65535|0'
end
redis.call('HSET', KEYS[1], unpack(w))
redis.call('HSET', KEYS[2], 'top', fence_s)
return {fence_s, 'ok'}
`

// probeChunkRelease releases entities of chunk grants: a pair per chunk,
// its id and the mask of its positions released (16 bits); a grant whose
// token prefix is not the record's (a newer grant took the chunk) is left
// to the per-entity path (none in the probe).
const probeChunkRelease = `
local fs, n = {}, #ARGV / 3
for c = 1, n do fs[c] = '#' .. ARGV[3 * c - 2] end
local recs = redis.call('HMGET', KEYS[1], unpack(fs))
local w = {}
for c = 1, n do
  local head, tokp, exp, held, odd = string.match(recs[c], '^(%d+|%d+|[^|]*|)([^|]*)|(%d+)|(%d+)|(%d+)$')
  if tokp ~= ARGV[3 * c - 1] then return 'moved' end
  held = bit.band(tonumber(held), bit.bnot(tonumber(ARGV[3 * c])))
  w[#w + 1], w[#w + 2] = fs[c], head .. tokp .. '|' .. exp .. '|' .. held .. '|' .. odd
end
redis.call('HSET', KEYS[1], unpack(w))
return 'ok'
`

// probeChunkRenew renews chunk grants: a pair per chunk, its id and token
// prefix; the new expiry first.
const probeChunkRenew = `
local fs, n = {}, (#ARGV - 1) / 2
for c = 1, n do fs[c] = '#' .. ARGV[2 * c] end
local recs = redis.call('HMGET', KEYS[1], unpack(fs))
local w = {}
for c = 1, n do
  local head, tokp, tail = string.match(recs[c], '^(%d+|%d+|[^|]*|)([^|]*)|%d+(|%d+|%d+)$')
  if tokp ~= ARGV[2 * c + 1] then return 'moved' end
  w[#w + 1], w[#w + 2] = fs[c], head .. tokp .. '|' .. ARGV[1] .. tail
end
redis.call('HSET', KEYS[1], unpack(w))
return 'ok'
`

// BenchmarkProbeChunks is BenchmarkProbeMask by records of today's
// 16-entity chunks (chunkSize), 16 chunks a grant call, each chunk
// renewed once, released ~140 entities a call.
func BenchmarkProbeChunks(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	ctx := context.Background()
	g, r, renew := redis.NewScript(probeChunkGrant), redis.NewScript(probeChunkRelease), redis.NewScript(probeChunkRenew)
	const pool, batch, chunk = 100_000, 256, 16
	keys := []string{"{t}:entities", "{t}:dueinfo"}
	tick := func(T int) {
		claims := []string{"{t}:entities", "{t}:dueinfo", "{t}:claims:" + strconv.Itoa(T)}
		for lo := 0; lo < pool; lo += batch {
			exp := strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10)
			args := []any{strconv.Itoa(T + 1), "replica-0123456789", exp}
			rn := []any{exp}
			for k := lo; k < min(lo+batch, pool); k += chunk {
				id, tok := "c"+strconv.Itoa(k), "tok"+strconv.Itoa(T)+"."+strconv.Itoa(k)
				args = append(args, id, tok)
				rn = append(rn, id, tok)
			}
			res, err := g.Run(ctx, c, claims, args...).Slice()
			if err != nil {
				b.Fatal(err)
			}
			if res[1] != "ok" {
				b.Fatalf("grant: %v", res)
			}
			if err := renew.Run(ctx, c, keys, rn...).Err(); err != nil {
				b.Fatal(err)
			}
			// Releases of ~140 entities: 9 chunks, the last in part.
			for rl := lo; rl < min(lo+batch, pool); rl += 144 {
				var ra []any
				for k := rl; k < min(rl+144, lo+batch, pool); k += chunk {
					ra = append(ra, "c"+strconv.Itoa(k), "tok"+strconv.Itoa(T)+"."+strconv.Itoa(k), 65535)
				}
				if res, err := r.Run(ctx, c, keys, ra...).Result(); err != nil || res != "ok" {
					b.Fatal(res, err)
				}
			}
		}
	}
	probeTicks(b, c, pool, tick)
}
