package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Reason says why a run happens.
type Reason string

// The reasons of a run.
const (
	ReasonTick       Reason = "tick"
	ReasonReschedule Reason = "reschedule"
	ReasonRetry      Reason = "retry"
	ReasonTrigger    Reason = "trigger"
	ReasonQueued     Reason = "queued"
)

// Errors returned by the store. Compare with errors.Is.
var (
	ErrBusy       = errors.New("lease: busy")
	ErrAlreadyRan = errors.New("lease: tick already ran")
	ErrQuarantine = errors.New("lease: redis lost its data; granting nothing until old leases have expired")
	ErrNotHeld    = errors.New("lease: not held")
	// Causes of a lease context's cancellation (context.Cause).
	ErrLost      = errors.New("lease: lost (released by force, expired or taken over)")
	ErrUntrusted = errors.New("lease: not renewed within its trust window")
	// ErrRevoked: an operator unlocked the lease (Store.Unlock). It stays
	// held, busy for everyone else, until its holder releases it.
	ErrRevoked  = errors.New("lease: revoked by an operator (tickd unlock)")
	ErrReleased = errors.New("lease: released")
	ErrClosed   = errors.New("lease: store closed")
	// ErrStillHeld is Close's report of leases it dropped unreleased: they
	// stay in the backend until their TTL passes.
	ErrStillHeld = errors.New("lease: store closed with leases not released")
)

// BusyError says who holds a lease that could not be acquired.
type BusyError struct {
	Holder string    // replica id of the holder
	Since  time.Time // when the holder acquired it
	Fence  int64     // the holder's fencing token
	Queued bool      // a follow-up was requested for after the holder ends
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("lease: busy (held by %s since %s, fence %d)", e.Holder, e.Since.UTC().Format(time.RFC3339), e.Fence)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// QuarantineError says how long nothing will be granted: Redis holds no
// tickd state (a first start, or a data loss), so no lease is granted until
// any lease it may have forgotten has expired (Options.MaxTTL).
type QuarantineError struct{ Left time.Duration }

func (e *QuarantineError) Error() string {
	return fmt.Sprintf("%v (%v left)", ErrQuarantine, e.Left.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrQuarantine) true.
func (e *QuarantineError) Is(target error) bool { return target == ErrQuarantine }

// EarlyTolerance is how far ahead of the store's clock (Redis's TIME) a
// tick may be started. A replica whose clock runs ahead gets an
// *EarlyError instead, so that it cannot start ticks before the others.
const EarlyTolerance = 500 * time.Millisecond

// ErrEarly is matched by an *EarlyError.
var ErrEarly = errors.New("lease: tick not yet due by the store's clock")

// EarlyError says how long until the store's clock reaches the tick.
type EarlyError struct{ Wait time.Duration }

func (e *EarlyError) Error() string {
	return fmt.Sprintf("%v (due in %v: is this replica's clock ahead?)", ErrEarly, e.Wait.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrEarly) true.
func (e *EarlyError) Is(target error) bool { return target == ErrEarly }

// AlreadyRanError says which tick already started a run.
type AlreadyRanError struct{ LastTick time.Time }

func (e *AlreadyRanError) Error() string {
	return "lease: tick already ran (last tick run " + e.LastTick.UTC().Format(time.RFC3339Nano) + ")"
}

// Is makes errors.Is(err, ErrAlreadyRan) true.
func (e *AlreadyRanError) Is(target error) bool { return target == ErrAlreadyRan }

// Request asks for the lease of one (task, entity).
type Request struct {
	Task   string
	Entity string
	TTL    time.Duration // lease time to live; renewed every TTL/3
	Reason Reason
	// Tick is the scheduled instant of a ReasonTick run. The acquire fails
	// with ErrAlreadyRan when a tick run for a tick >= Tick already started.
	Tick time.Time
	// Queue, when the entity is busy, leaves a follow-up request that the
	// holder's release turns into one run after it.
	Queue bool
	// Chunk names the part of a tick's entity stream this request belongs
	// to (ReasonTick only), when the whole part is in one AcquireBatch call,
	// its requests one after the other. Any string: the store sends a hash
	// of it. The replicas' fan-outs send the same
	// chunks (the same ids, in the same order) for the same tick: the first
	// to send one takes it whole, in the step that grants its leases; the
	// others get ErrAlreadyRan for all of it without their entities being
	// read. So several replicas do not multiply the work of a tick.
	Chunk string
	// From is the due entry this run carries out. It is acked when the lease
	// is granted, and when it is busy (becoming a follow-up with Queue).
	From *Due
}

// Result is one answer of AcquireBatch: a Lease or an error.
type Result struct {
	Lease *Lease
	Err   error
}

// Lease is a held lease. Its Context is cancelled, with a cause, the moment
// the lease is lost or can no longer be trusted.
type Lease struct {
	Task     string
	Entity   string
	Reason   Reason
	Tick     time.Time // zero unless the run is for a tick
	Fence    int64     // fencing token: increases with every grant for this (task, entity)
	Acquired time.Time // local clock, before the request was sent
	Attempt  int       // from the due entry, if any
	// Requests are the ids of the requests (tickd trigger -wait) this run
	// answers with its outcome at release.
	Requests []string

	token string
	field string // the escaped entity id
	ttl   time.Duration
	store *Store

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	trusted  time.Time // the holder may trust the lease until then
	renewAt  time.Time
	failures int
	group    *trustGroup // Store.mu guards group and slot
	slot     int
	released bool
}

// Context is cancelled when the lease is lost, untrusted, released or the
// store closed; context.Cause says which.
func (l *Lease) Context() context.Context { return l.ctx }

// Cancel cancels the lease's Context with cause, as its holder stops the
// work it does under it (a timeout, a shutdown). The lease stays held, and
// renewed, until Release; Check reports cause from then on. A Context
// already cancelled keeps its first cause. The holder's run can so use the
// lease's Context as its own, instead of a child context per run.
func (l *Lease) Cancel(cause error) { l.cancel(cause) }

// TrustedUntil is the instant until which the holder may trust the lease:
// the send time of the last successful acquire or renewal, plus TTL, minus
// the safety margin.
func (l *Lease) TrustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trusted
}

// Check says, without waiting, whether the holder may still act on the
// lease: nil while it is held and trusted, otherwise the cause. The
// Context's cancellation arrives asynchronously, from a timer; a process
// frozen (SIGSTOP, a long GC pause) between the grant and the start of its
// run wakes up with that timer not yet fired. Call Check right before work
// that cannot be taken back, such as starting a process: past the trust
// window it drops the lease and cancels its Context there and then.
func (l *Lease) Check() error {
	if err := context.Cause(l.ctx); err != nil {
		return err
	}
	l.store.dropIfUntrusted(l, l.store.clock.Now())
	return context.Cause(l.ctx)
}

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// MinTTL is the shortest lease TTL a holder can keep: renewed every TTL/3,
// a shorter one leaves too little time for a renewal round to arrive.
const MinTTL = 1500 * time.Millisecond

// Margin is the part of a TTL the holder does not trust: clock drift between
// the holder and Redis, plus the time to stop a run. A holder trusts its
// lease until sent + ttl - Margin(ttl).
func Margin(ttl time.Duration) time.Duration { return ttl / 5 }

// trustEnd is the end of the trust window of a lease of ttl granted or
// renewed by a request sent at sent.
func trustEnd(sent time.Time, ttl time.Duration) time.Time { return sent.Add(ttl - Margin(ttl)) }

// Outcome says how a run ended, as recorded for status.
type Outcome string

// The outcomes of a run.
const (
	OutcomeDone       Outcome = "done"
	OutcomeReschedule Outcome = "reschedule" // done for now, asked to run again
	OutcomeFailed     Outcome = "failed"
	OutcomeTimeout    Outcome = "timeout"
	OutcomeLeaseLost  Outcome = "lease_lost"
	OutcomeCanceled   Outcome = "canceled" // stopped by shutdown, or never begun: handed over
	// OutcomeUnlocked records an operator's Unlock of a held lease.
	OutcomeUnlocked Outcome = "unlocked"
)

// allOutcomes is every Outcome; its length is a constant (NumOutcomes),
// for arrays counted by outcome.
var allOutcomes = [...]Outcome{OutcomeDone, OutcomeReschedule, OutcomeFailed, OutcomeTimeout, OutcomeLeaseLost, OutcomeCanceled, OutcomeUnlocked}

// NumOutcomes is how many Outcomes there are.
const NumOutcomes = len(allOutcomes)

// AllOutcomes is every Outcome, in a fixed order (an array: a caller's
// copy, no global to change).
func AllOutcomes() [NumOutcomes]Outcome { return allOutcomes }

// Index is o's position in AllOutcomes, or -1 when o is no Outcome of
// tickd's.
func (o Outcome) Index() int { return slices.Index(allOutcomes[:], o) }

// Outcomes lists every Outcome.
//
// Deprecated: use AllOutcomes; a slice any package can change is no list
// of constants.
var Outcomes = allOutcomes[:]

// Finished is what a run did, recorded at release for status.
type Finished struct {
	Outcome Outcome
	Started time.Time
	Ended   time.Time
	// Error is a failed run's error, kept as its last run's (cut to
	// MaxRunError bytes).
	Error string
}

// ReleaseTimeout bounds a release made after the run's own context ended
// (context.WithoutCancel): shutdown and a lost run still clean up, briefly.
const ReleaseTimeout = 5 * time.Second

// Next asks, atomically with the release, for another run of the same
// (task, entity) after Delay. It is durable: any replica carries it out.
type Next struct {
	Reason  Reason
	Delay   time.Duration
	Attempt int
	// HandOver says the run did not do its work (stopped by shutdown, or
	// never begun): the next run answers its Requests in its stead.
	HandOver bool
}

// Released is what a release hands back.
type Released struct {
	// FollowUp is true when a busy acquire asked for a follow-up while the
	// lease was held; the release enqueued one queued run (unless Next was
	// given, which already covers it).
	FollowUp bool
}

// Release gives the lease back and records the outcome. With next, it also
// enqueues another run in the same atomic step. A holder whose lease was
// taken over gets ErrNotHeld and touches nothing.
func (l *Lease) Release(ctx context.Context, o Finished, next *Next) (Released, error) {
	return l.store.release(ctx, l, o, next)
}

// ReleaseThen is Release without the wait: the release is queued, and then
// is told how it went, as Release would have returned it. It bounds itself
// by ReleaseTimeout. A holder that ends many runs a second (the
// scheduler's runs) so frees its goroutine at once.
func (l *Lease) ReleaseThen(o Finished, next *Next, then AfterRelease) {
	l.store.releaseThen(l, o, next, then)
}

// Due is a pending request for a run: a reschedule, retry, trigger or
// queued follow-up.
type Due struct {
	Task    string
	Entity  string
	Reason  Reason
	Attempt int       // consecutive reschedules or retries so far
	Tick    time.Time // the tick the chain started from, if any
	At      time.Time // when it is due
	// Requests are the ids of the requests the run answers (see
	// NewRequestID). Enqueue merges them into a pending entry it joins.
	Requests []string
	claim    string
}

// Held describes a lease someone holds, for status.
type Held struct {
	Task   string
	Entity string
	Holder string
	Since  time.Time
	Fence  int64
	Reason Reason
	TTL    time.Duration // time left
	// Revoked: an operator unlocked it (Store.Unlock); its holder is told
	// to stop, and it is free once released or after TTL.
	Revoked bool
}

// LastRun describes the last finished run of a (task, entity), for status.
type LastRun struct {
	Task     string
	Entity   string
	Outcome  Outcome
	Reason   Reason
	Replica  string
	Fence    int64
	Started  time.Time
	Ended    time.Time
	LastTick time.Time
	Error    string // a failed run's error, its first MaxRunError bytes
	// By is who ended it with tickd unlock -force (outcome unlocked, on
	// Replica, the holder); "" otherwise.
	By string
}

// runTick is the tick a run for r carries: its Tick, or its due entry's.
func (r *Request) runTick() time.Time {
	if r.Tick.IsZero() && r.From != nil {
		return r.From.Tick
	}
	return r.Tick
}
