package redisdriver

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// Per-lease answers of release.lua and renew.lua.
const (
	releasedOK       = "ok"      // released
	releasedFollowUp = "fu"      // released; a follow-up had been asked for
	releasedNotHeld  = "notheld" // the token no longer holds the lease: nothing touched
	renewedOK        = "1"
	renewedLost      = "0"
	renewedRevoked   = "r" // an operator revoked it (unlock.lua): stop, then release
	renewedReplaced  = "p" // a newer tick replaced it (acquire.lua): stop, then release
)

// What unlock.lua is asked to do, and what it did.
const (
	unlockRevoke    = "revoke"
	unlockForce     = "force"
	unlockedFreed   = "freed"
	unlockedRevoked = "revoked"
	unlockedAlready = "already" // revoked before
	// revokedMark begins the token of a revoked lease: its holder's renewals
	// are refused and its release still frees it.
	revokedMark = "!"
	// replacedMark begins the token of a lease a newer tick revoked
	// (acquire.lua's replace): it begins with revokedMark too.
	replacedMark = "!!"
	// The kinds of revocation published (revocations.go reads them):
	// revoked and freed (unlock.lua; freed by unlock -force), replaced
	// (acquire.lua).
	revocationRevoked  = "r"
	revocationFreed    = "f"
	revocationReplaced = "p"
	// followUpReplace is the follow-up flag of an entity whose holder a
	// newer tick replaced ("1": one queued).
	followUpReplace = "2"
	// unlockedBy begins the error of a forced unlock's run record, then who.
	unlockedBy = "unlocked by "
	// lossFound ends an acquire's quarantine answer when that call found
	// the loss (lib.lua's reply_quarantine).
	lossFound = "found"
	// shardsChanged is the error reply of a script that named its shard
	// by a count the task is no longer kept in (lib.lua's shards_refused).
	shardsChanged = "tickd_shards_changed"
)

// luaConstants hands the scripts what Go and Lua share, defined once here:
// every script begins with these lines, then lib.lua. Only those keep
// says (nil: all): a script declares the ones it or lib.lua names, since
// Lua allows a function 200 locals at once.
func luaConstants(keep func(name string) bool) string {
	var b strings.Builder
	for _, c := range []struct {
		name string
		v    any
	}{
		{"EARLY_MS", driver.EarlyTolerance.Milliseconds()},
		{"MAX_REQS", int64(driver.MaxRequests)},
		{"REQUEST_TTL_MS", driver.RequestTTL.Milliseconds()},
		{"CLAIMS_TTL_MS", claimsTTL.Milliseconds()},
		{"CHUNK_ENTRY", int64(chunkEntry)},
		{"LINE_TTL_MS", (24 * time.Hour).Milliseconds()}, // a limit's waiting line unused this long is gone
		{"TICK_SCAN", int64(driver.TickScan)},
		{"TICK_AGE_DROP", int64(driver.TickAgeDrop)},
		{"ANSWER_SKIPPED", driver.AnswerSkipped},
		{"ANSWER_DROPPED", driver.AnswerDropped},
		{"REASON_RETRY", driver.ReasonRetry},
		{"REASON_TICK", driver.ReasonTick},
		{"REASON_QUEUED", driver.ReasonQueued},
		{"OUTCOME_UNLOCKED", driver.OutcomeUnlocked},
		{"OUTCOME_DONE", driver.OutcomeDone},
		{"CHUNK_MARK", chunkMark},
		{"INDEX_MARK", indexMark},
		{"GRANT_BUSY", driver.GrantBusy},
		{"GRANT_RAN", driver.GrantRan},
		{"GRANT_QUARANTINE", driver.GrantQuarantine},
		{"LOSS_FOUND", lossFound},
		{"GRANT_EARLY", driver.GrantEarly},
		{"RELEASED_OK", releasedOK},
		{"RELEASED_FOLLOW_UP", releasedFollowUp},
		{"RELEASED_NOT_HELD", releasedNotHeld},
		{"RENEWED_OK", renewedOK},
		{"RENEWED_LOST", renewedLost},
		{"RENEWED_REVOKED", renewedRevoked},
		{"RENEWED_REPLACED", renewedReplaced},
		{"REPLACED", replacedMark},
		{"REVOCATION_REPLACED", revocationReplaced},
		{"REVOCATION_REVOKED", revocationRevoked},
		{"REVOCATION_FREED", revocationFreed},
		{"FU_REPLACE", followUpReplace},
		{"BUSY_REPLACE", busyReplace},
		{"BUSY_QUEUE", busyQueue},
		{"BUSY_SKIP", busySkip},
		{"REASON_REPLACED", driver.ReasonReplaced},
		{"REASON_CATCH_UP", driver.ReasonCatchUp},
		{"REASON_BACKFILL", driver.ReasonBackfill},
		{"UNLOCK_REVOKE", unlockRevoke},
		{"UNLOCK_FORCE", unlockForce},
		{"UNLOCKED_FREED", unlockedFreed},
		{"UNLOCKED_REVOKED", unlockedRevoked},
		{"UNLOCKED_ALREADY", unlockedAlready},
		{"REVOKED", revokedMark},
		{"UNLOCKED_BY", driver.Escape(unlockedBy)},
		{"SHARDS_CHANGED", shardsChanged},
		{"WAIT_GRACE_MS", driver.LimitWaitGrace.Milliseconds()},
		{"FULL_POLL_MS", driver.FullPoll.Milliseconds()},
		{"MAX_FULL_WAIT_MS", driver.MaxFullWait.Milliseconds()},
		{"FAIR_UNIT", int64(driver.FairUnit)},
		{"FAIR_HEAD", int64(driver.FairHead)},
		{"STARTS_BUCKET_MS", (driver.StartsWindow / driver.StartsBuckets).Milliseconds()},
		{"STARTS_BUCKETS", int64(driver.StartsBuckets)},
		{"AUTO_HOLD_MS", driver.AutoHold.Milliseconds()},
		{"AUTO_SAID_MS", driver.AutoSaidFor.Milliseconds()},
		{"AUTO_MARGIN", driver.AutoMargin},
		{"AUTO_DECREASE", driver.AutoDecrease},
		{"AUTO_DECREASE_AGAIN", driver.AutoDecreaseAgain},
		{"AUTO_RECOVER", driver.AutoRecover},
		{"AUTO_PROBE", driver.AutoProbe},
		{"AUTO_AHEAD", int64(driver.AutoAhead)},
		{"AUTO_FLOOR", driver.AutoFloor},
	} {
		if keep != nil && !keep(c.name) {
			continue
		}
		switch v := c.v.(type) {
		case int64:
			fmt.Fprintf(&b, "local %s = %d\n", c.name, v)
		case float64:
			fmt.Fprintf(&b, "local %s = %s\n", c.name, strconv.FormatFloat(v, 'g', -1, 64))
		default:
			fmt.Fprintf(&b, "local %s = '%s'\n", c.name, v)
		}
	}
	return b.String()
}

// What acquire.lua does for a busy entity (its QUEUE argument).
const (
	busySkip    = "0"
	busyQueue   = "1" // a follow-up (Request.Queue); N > 1: a buffer of N ticks (QueueMax)
	busyReplace = "r" // the holder revoked, and a follow-up (Request.Replace)
)

// busyArg is r's QUEUE argument of acquire.lua.
func busyArg(r *driver.Request) string {
	switch {
	case r.Replace:
		return busyReplace
	case r.Queue && r.QueueMax > 1 && r.Reason == driver.ReasonTick:
		return strconv.Itoa(r.QueueMax)
	case r.Queue:
		return busyQueue
	}
	return busySkip
}
