package redisdriver

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// luaFiles are the scripts: lib.lua, the shared library, and one file per
// script.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaFile is the text of lua/name.lua.
func luaFile(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded: only a misspelt name gets here, at start-up
	}
	return string(b)
}

// Every script is the constants Go shares with Lua, its arguments' names,
// the shared library (and the chunk path's, for the scripts that take it),
// then its own body. Each is put together (and its
// SHA1 taken) the first time it is run, not at start-up: a daemon without
// Redis never pays for them, and one with Redis pays for those it runs.
var (
	scriptAcquire  = newScript("acquire", acquireArgs, "chunk")
	scriptRenew    = newScript("renew", renewArgs)
	scriptRelease  = newScript("release", releaseArgs, "chunk")
	scriptEnqueue  = newScript("enqueue", enqueueArgs)
	scriptTake     = newScript("take", takeArgs)
	scriptAck      = newScript("ack", ackArgs)
	scriptUnlock   = newScript("unlock", unlockArgs, "chunk")
	scriptSweep    = newScript("sweep", sweepArgs, "chunk")
	scriptAnnounce = newScript("announce", announceArgs)
	scriptKnown    = newScript("known", knownArgs)
	scriptEpoch    = newScript("epoch", epochArgs)
	scriptProbe    = newScript("probe", probeArgs)
	scriptSucc     = newScript("successors", successorsArgs)
	scriptRaise    = newScript("raiselost", raiseLostArgs)
	scriptLayout   = newScript("setlayout", setLayoutArgs)
	scriptTick     = newScript("tick", tickArgs)
	scriptLimit    = newScript("limit", limitArgs)
	scriptSettle   = newScript("settle", settleArgs)
	scriptClose    = newScript("close", closeArgs)
	scriptLearn    = newScript("learn", learnArgs)
	scriptEndPause = newScript("endpause", endPauseArgs)
	scriptBackfill = newScript("backfill", backfillArgs)
)

// luaPrelude is every shared constant, then lib.lua (what tests' scripts
// begin with).
var luaPrelude = sync.OnceValue(func() string { return luaConstants(nil) + luaFile("lib") })

// newScript is lua/name.lua after the shared constants that it or its
// libraries name, its arguments' names (a library reads them too), and
// the definitions of lib.lua and the libraries libs (lua/chunk.lua) that
// it uses, put together on its first use.
func newScript(name string, a argv, libs ...string) func() *redis.Script {
	scriptSources[name] = func() string { return scriptSource(name, a, libs...) }
	return sync.OnceValue(func() *redis.Script { return redis.NewScript(scriptSources[name]()) })
}

// scriptSources is each script's text by name (tests read them all).
var scriptSources = map[string]func() string{}

// scriptSource is newScript's text.
func scriptSource(name string, a argv, libs ...string) string {
	lib, body := luaFile("lib"), luaFile(name)
	for _, l := range libs {
		lib += luaFile(l)
	}
	lib = usedOf(lib, body)
	named := map[string]bool{}
	for _, w := range regexp.MustCompile(`\b[A-Z_][A-Z0-9_]*\b`).FindAllString(lib+body, -1) {
		named[w] = true
	}
	return luaConstants(func(c string) bool { return named[c] }) + a.lua() + lib + body
}

// luaWord is a Lua name, and luaDefined the names a library's top-level
// statement defines: "local function f" or "local a, b =".
var (
	luaWord    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	luaDefined = regexp.MustCompile(`^local (?:function ([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_, ]*?) *=)`)
	luaComment = regexp.MustCompile(`(?m)^[ \t]*--.*$`)
)

// usedOf is the top-level statements of lib (each starts a line with
// "local": lua/lib.lua's and lua/chunk.lua's are all definitions) that
// body uses, itself or through those it uses, in lib's order. A script
// runs its library's definitions at each call, making a closure of each
// function: one that defines only what it calls costs Redis less. Every
// name outside a line of comment is looked for as a word (in strings and
// comments after code too), so a statement is kept whenever in doubt.
func usedOf(lib, body string) string {
	type stmt struct {
		text string
		defs []string
	}
	var stmts []stmt
	for _, s := range strings.SplitAfter(lib, "\nlocal ") {
		if len(stmts) > 0 {
			s = "local " + s
		}
		s = strings.TrimSuffix(s, "local ")
		var defs []string
		if m := luaDefined.FindStringSubmatch(s); m != nil {
			defs = append(defs, m[1])
			for _, d := range strings.Split(m[2], ",") {
				defs = append(defs, strings.TrimSpace(d))
			}
		}
		stmts = append(stmts, stmt{s, defs})
	}
	by := map[string][]int{}
	for i, s := range stmts {
		for _, d := range s.defs {
			if d != "" {
				by[d] = append(by[d], i)
			}
		}
	}
	keep := make([]bool, len(stmts))
	var use func(text string)
	use = func(text string) {
		for _, w := range luaWord.FindAllString(luaComment.ReplaceAllString(text, ""), -1) {
			for _, i := range by[w] {
				if !keep[i] {
					keep[i] = true
					use(stmts[i].text)
				}
			}
		}
	}
	for i, s := range stmts {
		if len(s.defs) == 0 {
			keep[i] = true // not a definition: kept, and what it names
			use(s.text)
		}
	}
	use(body)
	var b strings.Builder
	for i, s := range stmts {
		if keep[i] {
			b.WriteString(s.text)
		}
	}
	return b.String()
}

// An argv declares where a script's arguments are, once: Go places each
// at its constant (the positions below, from 0), and the script reads it
// by name, a local its prelude sets: ARGV[A_NAME] for a fixed argument,
// and, for the part repeated per lease or entity after the A_FIXED fixed
// ones, ARGV[b + E_NAME] from the part's base b = A_FIXED + E_STRIDE * (i -
// 1). No script indexes ARGV by a number (TestScriptsNameTheirArguments).
type argv struct {
	fixed []arg // in ARGV order
	each  []arg // an entity's part, in order; nil when none repeats
}

// arg names an argument at position pos (of the fixed ones, or in an
// entity's part).
type arg struct {
	name string
	pos  int
}

// lua is the Lua locals that name a's positions (1-based, as ARGV is).
func (a argv) lua() string {
	var b strings.Builder
	for _, f := range a.fixed {
		fmt.Fprintf(&b, "local A_%s = %d\n", f.name, f.pos+1)
	}
	fmt.Fprintf(&b, "local A_FIXED = %d\n", len(a.fixed))
	for _, e := range a.each {
		fmt.Fprintf(&b, "local E_%s = %d\n", e.name, e.pos+1)
	}
	if len(a.each) > 0 {
		fmt.Fprintf(&b, "local E_STRIDE = %d\n", len(a.each))
	}
	return b.String()
}

// acquire.lua's: the batch's arguments, then a triple per entity (or per
// chunk: its fields space-joined, its tokens' prefix, "").
const (
	acqMaxTTL = iota // the quarantine after a data loss, ms
	acqHolder        // the holder, escaped
	acqPrefix        // the member prefix: the escaped task .. ":"
	acqTTL           // ms
	acqReason
	acqTick     // ms; 0: not a tick run
	acqQueue    // busySkip, busyQueue or busyReplace
	acqChunks   // "" or an entry of chunkEntry bytes per chunk (chunkArgs): triple t holds the m entities of chunk id, record rid
	acqShards   // the shard count the task's shard was named by; "": not checked
	acqTwice    // 0|1: 1 when an entity is asked for twice in the batch
	acqFloor    // ms: a tick >= it counts as run (Request.Floor); tick's when 0
	acqChannel  // the revocations channel with busyReplace, else ""
	acqQueueAge // ms: a buffered tick older than this before the tick is missed; 0: none
	acqRecord   // ms: how long the run record (keys.ran) is kept; 0: none (its keys left out)
	acqFanned   // ms: how long the tick's fan mark (keys.fanned) is kept; 0: none (its key left out)
	acqSeen     // µs: the highest fence of the bucket this driver was granted and trusted; 0: none
	acqRecords  // 1: the task's chunks may be kept as records (chunk.lua); 0: none are
	acqFixed
)

const (
	acqField = iota // the entity's field
	acqToken        // its token
	acqFrom         // "" or the due entry the run carries out
	acqStride
)

var acquireArgs = argv{
	fixed: []arg{{"MAX_TTL", acqMaxTTL}, {"HOLDER", acqHolder}, {"PREFIX", acqPrefix}, {"TTL", acqTTL},
		{"REASON", acqReason}, {"TICK", acqTick}, {"QUEUE", acqQueue}, {"CHUNKS", acqChunks}, {"SHARDS", acqShards},
		{"TWICE", acqTwice}, {"FLOOR", acqFloor}, {"CHANNEL", acqChannel}, {"QUEUE_AGE", acqQueueAge}, {"RECORD", acqRecord}, {"FANNED", acqFanned}, {"SEEN", acqSeen},
		{"RECORDS", acqRecords}},
	each: []arg{{"FIELD", acqField}, {"TOKEN", acqToken}, {"FROM", acqFrom}},
}

// release.lua's: the member prefix, the stride, the shard count and
// whether a lease's entity comes twice, then per lease its field, token,
// run record and, with the long stride, next and reqs.
const (
	relPrefix = iota
	relStrideArg
	relShards
	relTwice
	relRecords // 1: the leases' entities may be in chunk records (chunk.lua): detached first
	relFixed
)

const (
	relField = iota
	relToken
	relRecord
	relNext
	relReqs
	relStrideLong
	// relStrideShort: a batch of plain releases (nothing asked for after
	// the runs, no requests to answer) leaves next and reqs out.
	relStrideShort = relNext
)

var releaseArgs = argv{
	fixed: []arg{{"PREFIX", relPrefix}, {"STRIDE", relStrideArg}, {"SHARDS", relShards}, {"TWICE", relTwice}, {"RECORDS", relRecords}},
	each:  []arg{{"FIELD", relField}, {"TOKEN", relToken}, {"RECORD", relRecord}, {"NEXT", relNext}, {"REQS", relReqs}},
}

// renew.lua's: the shard count, then per lease its field, token and TTL (ms).
const (
	renShards = iota
	renFixed
)

const (
	renField = iota
	renToken
	renTTL
	renStride
)

var renewArgs = argv{fixed: []arg{{"SHARDS", renShards}}, each: []arg{{"FIELD", renField}, {"TOKEN", renToken}, {"TTL", renTTL}}}

// enqueue.lua's.
const (
	enqMember = iota
	enqReason
	enqDelay // ms
	enqAttempt
	enqTick   // ms
	enqReqs   // request ids, comma-joined
	enqShards // the shard count; "": not checked
	enqFixed
)

var enqueueArgs = argv{fixed: []arg{{"MEMBER", enqMember}, {"REASON", enqReason}, {"DELAY", enqDelay},
	{"ATTEMPT", enqAttempt}, {"TICK", enqTick}, {"REQS", enqReqs}, {"SHARDS", enqShards}}}

// take.lua's.
const (
	takeLimit      = iota
	takeVisibility // ms
	takeClaim      // the claim prefix
	takeFixed
)

var takeArgs = argv{fixed: []arg{{"LIMIT", takeLimit}, {"VISIBILITY", takeVisibility}, {"CLAIM", takeClaim}}}

// ack.lua's.
const (
	ackMember = iota
	ackClaim
	ackField
	ackReqs
	ackFixed
)

var ackArgs = argv{fixed: []arg{{"MEMBER", ackMember}, {"CLAIM", ackClaim}, {"FIELD", ackField}, {"REQS", ackReqs}}}

// unlock.lua's.
const (
	unlField = iota
	unlBy    // escaped
	unlMode  // unlockRevoke or unlockForce
	unlChan  // the revocations channel
	unlTask  // escaped
	unlFixed
)

var unlockArgs = argv{fixed: []arg{{"FIELD", unlField}, {"BY", unlBy}, {"MODE", unlMode}, {"CHANNEL", unlChan}, {"TASK", unlTask}}}

// sweep.lua's.
const (
	swpCursor = iota
	swpCount
	swpStateTTL // ms
	swpFixed
)

var sweepArgs = argv{fixed: []arg{{"CURSOR", swpCursor}, {"COUNT", swpCount}, {"STATE_TTL", swpStateTTL}}}

// announce.lua's.
const (
	annReplica = iota // escaped
	annTTL            // ms
	annTasks          // escaped, space-joined
	annProcess
	annHost    // escaped
	annVersion // escaped
	annLast    // ms of this process's previous announcement; 0: none
	annFixed
)

var announceArgs = argv{fixed: []arg{{"REPLICA", annReplica}, {"TTL", annTTL}, {"TASKS", annTasks},
	{"PROCESS", annProcess}, {"HOST", annHost}, {"VERSION", annVersion}, {"LAST", annLast}}}

// known.lua's, epoch.lua's, probe.lua's and others': a few arguments each.
var (
	knownArgs      = argv{fixed: []arg{{"TASK", 0}}}                              // escaped
	epochArgs      = argv{fixed: []arg{{"MAX_TTL", 0}, {"SEEN", 1}, {"LOST", 2}}} // ms; µs (quarantine's seen); 0|1
	probeArgs      = argv{fixed: []arg{{"VALUE", 0}}}
	successorsArgs = argv{fixed: []arg{{"RUNS", 0}}}    // comma-joined
	raiseLostArgs  = argv{fixed: []arg{{"LOST_AT", 0}}} // ms
	setLayoutArgs  = argv{fixed: []arg{{"VALUE", 0}, {"GEN", 1}, {"OVER", 2}}}
)

// tick.lua's.
const (
	tickTick    = iota // ms
	tickReplica        // escaped
	tickPart
	tickKeep   // records kept
	tickOldest // ms: a record for an older tick goes
	tickExpiry // ms: the list's
	tickFixed
)

var tickArgs = argv{fixed: []arg{{"TICK", tickTick}, {"REPLICA", tickReplica}, {"PART", tickPart},
	{"KEEP", tickKeep}, {"OLDEST", tickOldest}, {"EXPIRY", tickExpiry}}}

// limit.lua's: then one part per start asked for.
const (
	limMaxTTL    = iota // ms
	limHolder           // escaped
	limTTL              // ms: how long the holder's runs count
	limBase             // the limit's key prefix
	limConc             // 0: none
	limInterval         // us; 0: no rate
	limTolerance        // us; for an auto limit, its burst less one
	limFair             // 0|1: Limit.Fair
	limAuto             // the rate before any answer, for an auto limit (IVAL -1)
	limFixed
)

// A start's part of limit.lua's arguments.
const (
	limKey    = iota // the budget key
	limWaiter        // escaped
	limSince         // ms; 0: now
	limHead          // ms: the head start
	limGroup         // "": not known; else "=" and the escaped group
	limWeight        // at least 1
	limEach
)

var limitArgs = argv{fixed: []arg{{"MAX_TTL", limMaxTTL}, {"HOLDER", limHolder}, {"TTL", limTTL}, {"BASE", limBase},
	{"CONC", limConc}, {"IVAL", limInterval}, {"TOL", limTolerance}, {"FAIR", limFair}, {"AUTO", limAuto}},
	each: []arg{{"KEY", limKey}, {"WAITER", limWaiter}, {"SINCE", limSince}, {"HEAD", limHead}, {"GROUP", limGroup}, {"WEIGHT", limWeight}}}

// settle.lua's: then key, runs pairs, then the keys given back.
const (
	setHolder   = iota // escaped
	setTTL             // ms
	setBase            // the limit's key prefix
	setInterval        // us
	setPairs           // how many key, runs pairs follow
	setFixed
)

var settleArgs = argv{fixed: []arg{{"HOLDER", setHolder}, {"TTL", setTTL}, {"BASE", setBase}, {"IVAL", setInterval}, {"PAIRS", setPairs}}}

// endpause.lua's.
var endPauseArgs = argv{fixed: []arg{{"TASK", 0}, {"INFO", 1}}}

// backfill.lua's.
var backfillArgs = argv{fixed: []arg{{"ID", 0}, {"RECORD", 1}, {"HOLDER", 2}, {"HOLD", 3}}}

// learn.lua's.
var learnArgs = argv{fixed: []arg{{"BASE", 0}, {"KEY", 1}, {"MAX", 2}, {"START", 3}, {"RATE", 4}, {"TOO_MANY", 5}, {"SOURCE", 6}}}

// close.lua's.
var closeArgs = argv{fixed: []arg{{"BASE", 0}, {"KEY", 1}, {"MS", 2}, {"WHY", 3}}}
