// Package lease gives each run of a (task, entity) the exclusive right to work
// on it, in Redis (lease.New(redisdriver.New(…), opts)) or in this process
// (lease.New(memdriver.New(), opts), the embedded default for one replica).
// Both keep the same promises; one conformance suite runs against both.
// lease imports no driver: its caller builds one.
//
// This package is the protocol: leases, their trust windows, the keeper
// that renews them, releases, fencing tokens and the errors. The state
// lives in a driver (lease/driver's Driver): lease/redisdriver, its keys
// and Lua scripts, or lease/memdriver, its Go twin; New runs a Store over
// any driver. The vocabulary (Request, Due, Outcome, TickRecord…) is
// lease/driver's: callers name driver.Request, driver.OutcomeDone.
//
// # The lease state machine
//
// A (task, entity) is, at any instant, in one of these states:
//
//	free ──Acquire──▶ held(token, fence) ──Release(token)──▶ free
//	                     │   ▲                                  ▲
//	                     │   └── renewal (keeper, every TTL/3) ─┘
//	                     ├── TTL passes without renewal ───────▶ free (expired)
//	                     ├── Unlock(force) (operator) ─────────▶ free
//	                     └── Unlock (operator) ──▶ revoked(token)
//	                                                 ├── Release(token) ▶ free
//	                                                 └── TTL passes ────▶ free
//
// Acquire is one Lua script (one round trip; AcquireBatch carries up to 256
// entities in one). It answers, in this order:
//
//   - quarantine: Redis lost its data (the epoch key is missing). Nothing is
//     granted for Options.MaxTTL, so no old holder can still trust a lease
//     Redis forgot. Afterwards, tick runs for ticks before the loss are
//     refused as already ran: they may have run, and their records are gone.
//     Every store looks for a loss every LossWatch (1s), whether or not
//     anything is acquired: it reads one bucket's epoch per server (per
//     master on a Cluster), and when one is gone gives every bucket that
//     lost its epoch one back at once: the quarantine is counted from the
//     loss for every task, not from each task's next tick.
//   - early: a tick run asked for a tick more than EarlyTolerance (500ms)
//     ahead of Redis's clock. A replica whose clock runs ahead waits, so it
//     cannot start tick T+1 before the others start tick T (which "already
//     ran" would then refuse).
//   - already ran: a tick run asked for tick T and a tick run for a tick >= T
//     already started on some replica (the per-entity state records the last
//     tick; it outlives the lease for Options.StateTTL). Other reasons skip
//     this check.
//   - busy: someone holds the lease; BusyError says who, since when, with
//     which fence. With Request.Queue a follow-up flag is left, and the
//     holder's release turns it into exactly one queued run after it. The
//     queued run carries the latest tick of the requests folded into it,
//     and that tick counts as run from then on.
//   - granted: a new lease with a random token and a fencing token
//     max(last fence + 1, Redis server time in µs). Fences increase for ever:
//     after the lease expired, after the state expired, and after Redis lost
//     every key.
//
// # Trust
//
// A holder trusts its lease until sent + TTL - Margin(TTL), where sent is
// taken before the acquire or renewal request was sent. The Store's keeper
// renews every held lease in one pipelined round every TTL/3 (token-checked:
// a lease that is gone or under another token is lost). A round is waited
// for until the earliest trust end of its leases: an answer however late
// moves each window from when the round was sent, so a slow Redis or a
// loaded replica loses no lease that an answer inside the window would
// keep (TestSlowRenewalIsWaitedFor). The lease's Context
// is cancelled, with a cause, the moment the lease is lost (ErrLost) or its
// trust window ends without a successful renewal (ErrUntrusted, e.g. Redis
// unreachable or the process frozen past the window). Margin(TTL) is TTL/5:
// a run stopped at the end of the trust window has that long to exit before
// Redis could hand the lease to someone else. The holder may cancel the
// Context itself (Lease.Cancel: the scheduler's run timeout and shutdown),
// without a change of state: the lease stays held and renewed until
// Release, and the first cause stays.
//
// Leases whose windows end at the same instant (one TTL, granted by one
// acquire round trip or renewed by one renewal round) share one timer; a
// renewal moves a lease to its round's timer.
//
// The cancellation comes from a timer, so it is asynchronous: a process
// frozen (SIGSTOP, a long GC pause) while Redis answered its acquire wakes
// up holding a grant whose window has already ended, and could start the run
// before the timer goroutine cancels it — after another replica's newer
// lease, with an older fence. Lease.Check reads the clock there and then;
// the scheduler calls it right before the irreversible step of a run (the
// process start, the HTTP request, the Go handler call), so no run begins
// outside its trust window.
//
// # Unlock
//
// An operator's Unlock revokes a lease without freeing it: unlock.lua puts
// a mark ('!') in front of its token. Every other acquire still finds it
// busy; the holder's next renewal is answered "revoked" (the keeper drops
// it, cause ErrRevoked, and the scheduler stops the run); the holder's
// release, token-checked, takes the marked token as its own and frees it.
// A holder that never renews nor releases (frozen, cut off) loses it when it
// expires, one TTL after its last renewal at most, as any lease. So an
// unlock never lets two runs of one entity overlap. A store that holds the
// lease it unlocks tells its run at once. Unlock with force frees the lease
// at once (the old behaviour, for a holder known to be dead): its holder
// hears of it at its next renewal (ErrLost), and until then its run may
// overlap a new one.
//
// # Replicas and failover
//
// Redis replicates asynchronously, so a grant written to a primary that then
// dies can be missing on the replica promoted in its place, which would grant
// the entity again while the first holder runs. With Options.ReplicaAcks
// (AcksAuto by default: every replica the primary reports online) a write
// that moves a trust window is trusted only once the replicas have it:
//
//	acquire batch ─▶ [EVALSHA …, WAIT n t] ─▶ n acked: granted, trusted from sent
//	                                       └▶ fewer:   *driver.AckError; each grant is
//	                                                   released and handed over
//	                                                   (a due run, its tick kept)
//	renewal round ─▶ [EVALSHA …, WAIT n t] ─▶ n acked: trust window moves
//	                                       └▶ fewer:   a failed round; the window
//	                                                   ends where it was
//
// WAIT covers every earlier write of its connection, and a trusted window
// begins before the request was sent, so a promoted replica that has the
// write holds the lease at least as long as its holder trusts it (Redis nodes'
// clocks agreeing, as Redis's own key expiry requires). A replica that lacked
// a write had it refused: no run started under it. Fences come from the
// promoted node's clock or the last fence it holds plus one; the last fence
// any run saw was acknowledged, so they keep increasing. t is a tenth of the
// shortest TTL (at most 1s); releases are not waited for (a lost one leaves
// the lease to expire); Enqueue waits, so a stored trigger survives.
//
// # Release and the due set
//
// Release is token-checked: a holder whose lease was taken over gets
// ErrNotHeld and touches nothing. In the same script it records the run's
// outcome (for status) and enqueues Next (reschedule, retry, hand-over) or a
// requested follow-up, so a request is durable the moment the lease is free.
// Releases made while one is in flight are batched into the next round trip
// (one script call per task). Release waits for its answer; ReleaseThen
// queues the release and hands the same answer to an AfterRelease once the
// lease is dropped (its Context cancelled with ErrReleased), so the
// scheduler's run goroutine is free for the next run at once.
//
// Due entries (reschedules, retries, triggers, follow-ups) live in a sorted
// set, one per (task, entity): an earlier pending one covers a later one.
// TakeDue hides each taken entry for a visibility timeout under a new claim;
// the acquire that grants its lease acks it, and an entry whose taker died
// before that comes back.
// An entry whose lease turns out busy becomes a follow-up (or is dropped
// without Request.Queue), so it runs after the holder, never during it.
//
// # Requests (tickd trigger -wait)
//
// A due entry carries the ids of the requests it answers (Due.Requests, at
// most 32, the newest kept). Enqueue into a pending entry adds its ids to
// it; into a taken one, it starts a new entry with its own ids, since the
// taker answers the ids it took. The grant hands them to the Lease; a busy
// entry passes them to the follow-up (prefix:{NN}:TASK:followups, read by the
// holder's release) or, without Queue, answers them AnswerSkipped; Ack
// answers AnswerDropped. The release answers them with the run's outcome,
// in the same script, or, for a run handed over (Next.HandOver), passes
// them to the next run. Answers live in prefix:{NN}:TASK:request:ID, a hash
// entity → outcome, for an hour after the last; the scripts find that key
// among their KEYS by the id.
//
// # Keys and stored formats
//
// All keys live under one prefix, in layout 3 (LayoutVersion; layout 2 is
// the same without the chunks' records, and this tickd runs on it without
// keeping any, beside a tickd of layout 2). Each task
// belongs to one of 64 buckets (CRC-32 of its name, modulo 64), and every
// key a script touches for a task carries its bucket's hash tag, {NN}: one
// script, one Redis Cluster slot, on a single Redis, behind Sentinel and on
// a Cluster alike.
//
//	prefix:{NN}:epoch              the bucket's epochValue
//	prefix:{NN}:due                sorted set: member task:entity (escaped), score: when due
//	prefix:{NN}:dueinfo            hash: member → dueInfo; and "top" (no member is
//	                               without a ':'): the highest fence the bucket granted
//	                               (a rollback that forgot a tickd's grant is found by
//	                               that tickd: lib.lua's quarantine)
//	prefix:{NN}:TASK:entities      field: entity id (escaped), value: entityValue;
//	                               field '#' + a chunk's id: its record (chunkRecord:
//	                               the state of its entities but those in their own
//	                               values, lua/chunk.lua); field '@' + an entity's: the
//	                               chunk and position whose record may hold it; field
//	                               '#' alone: the task kept a record (only then does the
//	                               per-entity path look up the index)
//	prefix:{NN}:TASK:followups     hash: entity → the tick and request ids of a queued follow-up
//	prefix:{NN}:TASK:request:ID    hash: entity → outcome (a request's answers)
//	prefix:{NN}:TASK:claims:TICK   set: the chunks of the tick's entity stream
//	                               taken (Request.Chunk), kept 2 minutes after the last;
//	                               Store.Taken reads it
//	prefix:{NN}:TASK:ticks         list: the task's tick records, newest first (tick.lua)
//	prefix:{NN}:TASK:failures      list: recent failed runs, JSON (Failure), newest first
//	prefix:{NN}:TASK:actions       list: operator actions, JSON (Action), newest first
//	prefix:actions                 list: every operator action, of every task and of none
//	                                   (migrate), newest first, 100 kept: the console's actions page
//	prefix:failures                list: the newest failed runs of every task, 50 kept:
//	                                   the console's failures page
//	prefix:paused                  set of paused tasks (no script reads it)
//	prefix:pauses                  hash: task → PauseInfo, JSON (who, when, why, until)
//	prefix:tasks                   hash: task → TaskInfo, JSON: the task registry, every
//	                               task a replica ran, until ForgetTask (registry.go)
//	prefix:replicas                hash: replica (escaped) → announceValue
//	prefix:duplicates              hash: replica → host|until_ms: another live process
//	                               announces its id (written by either one that finds it)
//	prefix:{NN}:TASK:shards        the task's shard count, recorded once (shards.go)
//	prefix:sweep, prefix:ackprobe, prefix:layout
//
// A task of several shards (Store.WantShards, a config's shards) keeps
// shard s > 0 of its entities under the task name TASK~s (ShardName; "~"
// is in no task name) in a bucket of its own: the buckets in the order of
// their hash slots, from the task's own, s places on with s's 6 bits
// reversed, so that any number of shards spreads evenly over the slots.
// An entity is in shard CRC-32(id) mod n. Every TASK key above exists per
// shard but the history's (ticks, failures, actions: the task's own, in
// shard 0's bucket); the store puts each request in its shard and reads
// status, pages, pending entries and answers over all of them. The count
// is recorded the first time a store needs it, and only a reshard
// (Store.Reshard, tickd migrate) changes it: every replica looks for an
// entity in one place. Each shard's slot holds the task's layout (the
// Redis driver's reshard.go); every grant, renewal, release and enqueue
// carries the count its shard was named by, and the driver refuses it
// (driver.ErrShardsChanged) when the count changed: the store reads the
// count again and names the shard anew, a held lease where it moved. A
// reshard runs while replicas run the task.
//
// Why buckets and not one tag per task: the epoch detects a data loss (a
// master that came back empty) by its absence, and a task new to the Redis
// would have no epoch either, so a per-task epoch would quarantine every
// new task, and refuse its first tick as run before the loss. A store gives
// all 64 bucket epochs a value before its first grant (a bucket found
// without one is quarantined), so a new task finds its bucket's epoch, and
// a shard that loses its data quarantines only the tasks of its buckets.
// Buckets also bound the polls: the due loop reads the first entry of the
// due sets of the buckets of the tasks the replica announced (of all 64
// every 50th poll) in one pipelined round trip, then takes from the
// buckets where one is due: at most 64 reads, whatever the number of tasks.
//
// A store grants, enqueues, takes and announces nothing while the prefix
// holds keys of layout 1 (prefix:epoch, prefix:due: an older tickd runs
// beside it) or prefix:layout names a newer layout; it looks again every
// 5s. Store.Migrate (tickd migrate) moves layout 1's keys over once every
// older tickd is stopped.
//
// Each stored or passed format is defined once per language, with the same
// field names: a type with encode and decode in redisdriver/format.go, and decode_* and
// encode_* in redisdriver/lua/lib.lua; TestCodecsAgree puts the same values (empty
// fields, hostile ids, the largest numbers) through both on a real Redis.
// The formats, fields separated by '|':
//
//	entityValue  last_tick|fence|token|exp|fu|touched|reason|tick|holder#last
//	runRecord    outcome|start|end|fence|reason|replica[|error]   (the last after '#';
//	                                     a failed run's error, escaped, cut to MaxRunError)
//	dueInfo      reason|attempt|tick|reqs|claim   (reqs: request ids, comma-joined; layout 1 had no reqs)
//	epochValue   quarantine_until|lost_at
//	dueFrom      claim|tick|reqs         (acquire's argument: the due entry a run carries out)
//	nextRun      reason|delay_ms|attempt|carry (release's argument: the run asked for next)
//	announceValue until|tasks|process|host|version|since|seen
//	                                     (the tasks a replica runs, until when; which
//	                                     process: two with one replica id are told so)
//	followUp     tick|reqs               (Lua only: the latest tick of the requests a
//	                                     queued run stands for, which it carries)
//
// A tick record is Go's (history.go); tick.lua reads only the tick and
// each part's replica, to put a replica's part in place over its earlier
// one:
//
//	tick record  tickMs part part…       one part per replica, space-joined
//	tick part    replica|state|written|entities|started|first|last|outcomes|skipped|src
//	                                     (src: 1 when the source failed, then :error, escaped)
//
// # History
//
// What happened (history.go) is written apart from the leases: a replica's
// part of a tick when its fan-out starts and ends and when its last run
// ends (Store.RecordTicks, one tick.lua call per part, acknowledged like an
// enqueue), failed runs in batches (Store.RecordFailures: LPUSH and LTRIM),
// operator actions (Store.RecordAction). Each write enforces its retention
// (Retention): the tick list is cut to Ticks records and to ticks within
// Age of the part's writing, and expires Age+24h after its last write (a
// task removed from every config leaves nothing behind); the lists are cut
// to their counts. The scheduler writes a replica's first part of a tick
// before its fan-out starts a run (so a replica killed mid-tick leaves an
// unfinished part: the tick is incomplete, not short), the rest from a
// writer goroutine, never on a run's path.
//
// Three formats travel between Go and the scripts without being stored:
//
//	token        |nonce-seq|           a lease token (the store's: nonce, hex; seq, base
//	             |nonce-seq.j|         36) between the separators the Redis driver adds;
//	                                   the j-th lease of a chunk (from 1) shares its
//	                                   first's nonce-seq
//	chunk        t:m:id:rid            acquire's ARGV[8], space-joined, one per chunk sent
//	                                   whole: request t (from 1) starts it, m entities,
//	                                   id the hash of its ids (Request.Chunk, its claim),
//	                                   rid the hash of the fields sent (its record)
//	repeat       answer*N              in a batch's reply: N equal answers (a taken
//	                                   chunk's "ran|T*16"), at most BatchSize
//
// TestChunkTokens and TestSplitReply hold the token and the repeat to their
// Go encoders; TestChunkTakenOnce runs the chunk through acquire.lua.
//
// The entity value holds the lease (token, exp in Redis ms: held means a
// token and exp > now; touched, reason, tick and holder of the grant), what
// outlives it (the last tick that started a run, the last fence granted, the
// follow-up flag; touched is also when the entity was last released) and the
// last run for status. Acquire answers each entity with the fence alone when
// granted, or busy|since|fence|holder, ran|last_tick, quarantine|ms_left,
// early|ms_until_tick (driver.GrantStatus). The words and numbers Go and the
// scripts share (EarlyTolerance, reasons, outcomes, reply words) are handed
// to every script as constants by redisdriver/format.go's luaConstants, never written
// twice.
//
// An acquire, release or renewal of a batch of one task is one script doing
// one HMGET and one HSET, which is what makes a batch cheap for Redis
// (docs/performance.md); a batch that asks for one entity twice grants it once.
// A value a script does not understand is replaced by acquire (as a new
// entity), left alone by the sweep and skipped by status.
//
// Ids are escaped (every byte outside [A-Za-z0-9._-] as %XX), so any task
// or entity id (spaces, colons, braces, '|', '#', newlines, NUL, 10 KB) maps
// to one safe, collision-free key and field. Replica ids in values are
// escaped the same way.
//
// Hash fields cannot expire in Redis 7.0, so retention is a sweep: every
// Options.StateTTL/10 (at most every hour) one replica deletes, a HSCAN page
// at a time, the entities neither held nor touched within StateTTL. The
// replicas' keepers all ask; the first to set prefix:sweep (SET NX, expiring
// after the interval) sweeps. Status reads with SCAN and HSCAN, a page at a
// time (SCAN on every master of a Cluster).
//
// # Chunks
//
// A chunk is a run of 16 consecutive entities of a tick's entity stream,
// 32 in a task of 128 run slots or more (the scheduler's chunkFor; the
// Redis store sends at most 32 as one), in source order: a fan-out without spread
// cuts its stream so, and every replica reading the same source for the
// same tick cuts the same chunks. A batch that holds a whole chunk names
// it (Request.Chunk); the store sends it as one argument triple (its
// entities' fields space-joined, the token prefix its leases share) and a
// descriptor (t:m:id:rid, above). acquire.lua takes the chunk with one SADD of
// its id to the tick's claims set (prefix:{NN}:TASK:claims:TICK), in the
// same call that grants its leases: the first replica to send a chunk
// takes it whole; the others get "already ran" for all of it, one repeated
// answer, without its fields even being read. A chunk is never taken
// without its leases, so a replica killed after taking one holds leases
// that expire, as without chunks. A batch holding part of a chunk, a
// spread fan-out and retries send entity by entity.
//
// Skipping ahead (the scheduler's fanOut): a fan-out whose batch came back
// taken whole skips the next chunks without sending them, sets their ids
// aside, and once its stream ends asks which were taken (Store.Taken: one
// SMISMEMBER) and sends the others, for at most a few rounds. So replicas
// spread over the stream instead of racing for the same batch, and a chunk
// nobody took (its taker died before) still runs in the tick.
//
// A "batch" is what one AcquireBatch call sends (at most BatchSize
// requests); a chunk lies within one batch or is sent entity by entity.
//
// # Redis Cluster
//
// With a go-redis ClusterClient, each script call goes to the master of its
// bucket's slot. A batch that waits for the replicas is split by master:
// each master's calls go in one pipeline on that master's connection,
// ending with its own WAIT, and an acker per master counts its replicas
// (AcksAuto). A master that moved (MOVED, or no answer) makes the client
// reload its slot map; the daemon's client also re-reads it every second.
// The due loop's poll skips the buckets of a shard that does not answer.
//
// # Limits
//
// A limit (Store.SetLimits, config's [[limits]]) is a budget every replica
// shares: a concurrency, a GCRA rate, and budgets an API closed. Its keys
// are in one bucket of their own (prefix:{NN}:~limit:NAME…); per entity,
// each entity's is a field or key under the limit's. A request that names
// limits (Request.Limits) takes a start under each in one script call per
// batch (limit.lua) before its lease is asked for; a start taken for a run
// whose lease is refused is given back at once (settle.lua), and a run
// without room gets a *LimitedError saying how long to wait. Each replica's
// runs under a limit are a hash of its own, set whole by that replica only
// (its calls for one limit one at a time), when runs end (gathered over
// 50ms) and every third of the runs' lease TTL, and counted for that TTL
// and a third more after the last: a replica that stops (killed, cut off)
// has its runs freed once their leases could no longer be trusted. The
// limit's bucket epoch is checked as a grant checks its own: after a data
// loss nothing is granted under the limit for the quarantine, during which
// every run that counted has stopped. A limit's writes are not waited on
// by the Redis replicas themselves: on one primary (a single Redis,
// Sentinel, an endpoint) a start is in the replication stream before the
// grant it was taken for, so the grant's acknowledgement covers it. On a
// Cluster whose limit lives on another master, that master's failover may
// forget starts until their replicas set their runs again (a third of a
// lease TTL).
package lease
