package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Errors returned by the store. Compare with errors.Is.
var (
	ErrBusy       = errors.New("lease: busy")
	ErrAlreadyRan = errors.New("lease: tick already ran")
	ErrQuarantine = errors.New("lease: no tickd state in this Redis, or it restarted (a first start under this key_prefix, a data loss, or a restart that may have loaded an older snapshot): granting nothing until any lease granted before can have expired")
	// Causes of a lease context's cancellation (context.Cause).
	ErrLost      = errors.New("lease: lost (released by force, expired or taken over)")
	ErrUntrusted = errors.New("lease: not renewed within its trust window")
	// ErrRevoked: an operator unlocked the lease (Store.Unlock). It stays
	// held, busy for everyone else, until its holder releases it.
	ErrRevoked = errors.New("lease: revoked by an operator (tickd unlock)")
	// ErrReplaced: a newer tick revoked the lease (on_busy = "replace").
	// It stays held, busy for everyone else, until its holder releases it.
	ErrReplaced = errors.New("lease: replaced by a newer tick (on_busy = \"replace\")")
	ErrReleased = errors.New("lease: released")
	ErrClosed   = errors.New("lease: store closed")
	// ErrStillHeld is Stop's report of leases it dropped unreleased: they
	// stay in the backend until their TTL passes.
	ErrStillHeld = errors.New("lease: store closed with leases not released")
)

// BusyError says who holds a lease that could not be acquired.
type BusyError struct {
	Holder string    // replica id of the holder
	Since  time.Time // when the holder acquired it
	Fence  int64     // the holder's fencing token
	Queued bool      // a follow-up was requested for after the holder ends
	// Replaced: this acquire revoked the holder (driver.Request.Replace).
	Replaced bool
	// Dropped and Missed: the buffered ticks this acquire took out
	// (driver.AcquireReply's).
	Dropped, Missed []time.Time
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
	Reason   driver.Reason
	Tick     time.Time // zero unless the run is for a tick
	Fence    int64     // fencing token: increases with every grant for this (task, entity)
	Acquired time.Time // local clock, before the request was sent
	Attempt  int       // from the due entry, if any
	// Requests are the ids of the requests (tickd trigger -wait) this run
	// answers with its outcome at release.
	Requests []string

	// d is the lease as its driver sees it (ids, token, TTL); ref fills in
	// what the run carried for a release.
	d     driver.Lease
	store *Store
	gen   uint64 // the store's shard-count generation at the grant (Store.where)

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	trusted  time.Time // the holder may trust the lease until then
	renewAt  time.Time
	failures int
	renewals int         // renewal rounds that kept it
	group    *trustGroup // Store.mu guards group and slot
	slot     int
	released bool
	// limits are the starts the run took under limits (Request.Limits),
	// given back when the lease ends.
	limits []limitHold
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
	l.store.keeper.dropIfUntrusted(l, l.store.clock.Now())
	return context.Cause(l.ctx)
}

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.d.TTL }

// ref is the lease as its driver sees it, with what the run carries now
// (its holder may have set Tick).
func (l *Lease) ref() *driver.Lease {
	l.d.Reason, l.d.Tick, l.d.Fence, l.d.Requests = l.Reason, l.Tick, l.Fence, l.Requests
	return &l.d
}

// Margin is the part of a TTL the holder does not trust: clock drift between
// the holder and Redis, plus the time to stop a run. A holder trusts its
// lease until sent + ttl - Margin(ttl).
func Margin(ttl time.Duration) time.Duration { return ttl / 5 }

// trustEnd is the end of the trust window of a lease of ttl granted or
// renewed by a request sent at sent.
func trustEnd(sent time.Time, ttl time.Duration) time.Time { return sent.Add(ttl - Margin(ttl)) }

// ReleaseTimeout bounds a release made after the run's own context ended
// (context.WithoutCancel): shutdown and a lost run still clean up, briefly.
const ReleaseTimeout = 5 * time.Second

// Released is what a release hands back.
type Released struct {
	// FollowUp is true when a busy acquire asked for a follow-up while the
	// lease was held; the release enqueued one queued run (unless Next was
	// given, which already covers it).
	FollowUp bool
	// Superseded is the tick of the entity's run waiting for a limit that
	// the run enqueued took the place of (driver.ReleaseReply), or zero.
	Superseded time.Time
}

// Release gives the lease back and records the outcome. With next, it also
// enqueues another run in the same atomic step. A holder whose lease was
// taken over gets ErrNotHeld and touches nothing.
func (l *Lease) Release(ctx context.Context, o driver.Finished, next *driver.Next) (Released, error) {
	return l.store.release(ctx, l, o, next)
}

// ReleaseThen is Release without the wait: the release is queued, and then
// is told how it went, as Release would have returned it. It bounds itself
// by ReleaseTimeout. A holder that ends many runs a second (the
// scheduler's runs) so frees its goroutine at once.
func (l *Lease) ReleaseThen(o driver.Finished, next *driver.Next, then AfterRelease) {
	l.store.releaseThen(l, o, next, then)
}

// Renewals is how many renewal rounds have kept the lease so far.
func (l *Lease) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}
