package redisdriver

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// entityValue is everything tickd keeps about one entity of a task: one
// field of the task's hash (keys.entities), the entity's escaped id, holding
//
//	last_tick|fence|token|exp|fu|touched|reason|tick|holder#last
type entityValue struct {
	LastTick int64         // the latest tick that started a run
	Fence    int64         // the latest fence granted
	Token    string        // the holder's, with revokedMark first once an operator revoked it; "" when free
	Exp      int64         // when the lease expires: held means Token != "" and Exp > now
	FollowUp string        // a follow-up asked for while held: "1" (queued), followUpReplace; "" ("0") for none
	Touched  int64         // the last grant or release: the sweep's clock, the grant's since
	Reason   driver.Reason // the current grant's
	Tick     int64         // the current grant's run tick: its own, or its due entry's
	Holder   string        // the current grant's replica (stored escaped)
	Last     *runRecord
}

// encode writes the value as the scripts store it.
func (e entityValue) encode() string {
	last := ""
	if e.Last != nil {
		last = e.Last.encode()
	}
	return strconv.FormatInt(e.LastTick, 10) + "|" + strconv.FormatInt(e.Fence, 10) + "|" + e.Token + "|" +
		strconv.FormatInt(e.Exp, 10) + "|" + cmp.Or(e.FollowUp, "0") + "|" + strconv.FormatInt(e.Touched, 10) + "|" +
		string(e.Reason) + "|" + strconv.FormatInt(e.Tick, 10) + "|" + driver.Escape(e.Holder) + "#" + last
}

// decodeEntity reads a value of the task's hash.
func decodeEntity(v string) (entityValue, error) {
	lease, last, ok := strings.Cut(v, "#")
	f := strings.Split(lease, "|")
	if !ok || len(f) != 9 {
		return entityValue{}, fmt.Errorf("%w: entity %q", errFormat, v)
	}
	var e entityValue
	var err error
	for _, n := range []struct {
		dst *int64
		s   string
	}{{&e.LastTick, f[0]}, {&e.Fence, f[1]}, {&e.Exp, f[3]}, {&e.Touched, f[5]}, {&e.Tick, f[7]}} {
		if *n.dst, err = number(n.s); err != nil {
			return entityValue{}, fmt.Errorf("%w: entity %q", errFormat, v)
		}
	}
	e.Token, e.FollowUp, e.Reason = f[2], f[4], driver.Reason(f[6])
	if e.FollowUp == "0" {
		e.FollowUp = ""
	}
	if e.Holder, err = driver.Unescape(f[8]); err != nil {
		return entityValue{}, fmt.Errorf("%w: entity %q", errFormat, v)
	}
	if last != "" {
		r, err := decodeRun(last)
		if err != nil {
			return entityValue{}, err
		}
		e.Last = &r
	}
	return e, nil
}

// held returns the lease an entity's value holds at Redis time now, if any.
func (e entityValue) held(task, entity string, now int64) (driver.Held, bool) {
	if e.Token == "" || e.Exp <= now {
		return driver.Held{}, false
	}
	return driver.Held{Task: task, Entity: entity, Holder: e.Holder, Since: driver.MSTime(e.Touched), Fence: e.Fence,
		Reason: e.Reason, TTL: time.Duration(e.Exp-now) * time.Millisecond, Revoked: strings.HasPrefix(e.Token, revokedMark)}, true
}

// lastRun returns an entity's last finished run, if any.
func (e entityValue) lastRun(task, entity string) (driver.LastRun, bool) {
	if e.Last == nil {
		return driver.LastRun{}, false
	}
	r := e.Last
	lr := driver.LastRun{Task: task, Entity: entity, Outcome: r.Outcome, Started: driver.MSTime(r.Start), Ended: driver.MSTime(r.End),
		Fence: r.Fence, Reason: r.Reason, Replica: r.Replica, LastTick: driver.MSTime(e.LastTick), Error: r.Error}
	if by, ok := strings.CutPrefix(lr.Error, unlockedBy); ok && lr.Outcome == driver.OutcomeUnlocked {
		lr.By, lr.Error = by, ""
	}
	return lr, true
}

// runRecord is an entity's last finished run, kept for status after the
// '#' of its value:
//
//	outcome|start|end|fence|reason|replica
//
// The holder writes it at release (its token proves the fence and reason
// are its lease's); unlock.lua writes one for a lease it removes.
type runRecord struct {
	Outcome    driver.Outcome
	Start, End int64
	Fence      int64
	Reason     driver.Reason
	Replica    string // stored escaped
	// Error is a failed run's error (at most MaxRunError bytes), stored
	// escaped after a seventh '|', which a run without one leaves out.
	Error string
}

func (r runRecord) encode() string {
	return string(r.appendTo(nil))
}

// appendTo appends the encoded record to buf: a batch's records are cut from
// one allocation (runRecords).
func (r runRecord) appendTo(buf []byte) []byte {
	buf = append(append(buf, r.Outcome...), '|')
	buf = append(strconv.AppendInt(buf, r.Start, 10), '|')
	buf = append(strconv.AppendInt(buf, r.End, 10), '|')
	buf = append(strconv.AppendInt(buf, r.Fence, 10), '|')
	buf = append(append(buf, r.Reason...), '|')
	buf = append(buf, driver.Escape(r.Replica)...)
	if r.Error != "" {
		buf = append(append(buf, '|'), driver.Escape(r.Error)...)
	}
	return buf
}

func decodeRun(v string) (runRecord, error) {
	f := strings.Split(v, "|")
	if len(f) != 6 && len(f) != 7 {
		return runRecord{}, fmt.Errorf("%w: run %q", errFormat, v)
	}
	r := runRecord{Outcome: driver.Outcome(f[0]), Reason: driver.Reason(f[4])}
	var err [5]error
	if len(f) == 7 {
		r.Error, err[4] = driver.Unescape(f[6])
	}
	r.Start, err[0] = number(f[1])
	r.End, err[1] = number(f[2])
	r.Fence, err[2] = number(f[3])
	r.Replica, err[3] = driver.Unescape(f[5])
	if errors.Join(err[:]...) != nil {
		return runRecord{}, fmt.Errorf("%w: run %q", errFormat, v)
	}
	return r, nil
}

// dueInfo is a pending request's details, the value of its member in the
// due-info hash (keys.dueInfo); the due set holds when it is due:
//
//	reason|attempt|tick|reqs|claim
//
// reqs are the request ids (tickd trigger -wait) the run answers,
// comma-joined; claim is "" until TakeDue takes the entry, then the taker's
// claim.
type dueInfo struct {
	Reason  driver.Reason
	Attempt int64
	Tick    int64
	Reqs    []string
	Claim   string
}

func (d dueInfo) encode() string {
	return string(d.Reason) + "|" + strconv.FormatInt(d.Attempt, 10) + "|" + strconv.FormatInt(d.Tick, 10) + "|" +
		strings.Join(d.Reqs, ",") + "|" + d.Claim
}

func decodeDueInfo(v string) (dueInfo, error) {
	f := strings.SplitN(v, "|", 5)
	if len(f) != 5 {
		return dueInfo{}, fmt.Errorf("%w: due info %q", errFormat, v)
	}
	d := dueInfo{Reason: driver.Reason(f[0]), Reqs: splitReqs(f[3]), Claim: f[4]}
	var e1, e2 error
	d.Attempt, e1 = number(f[1])
	d.Tick, e2 = number(f[2])
	if e1 != nil || e2 != nil {
		return dueInfo{}, fmt.Errorf("%w: due info %q", errFormat, v)
	}
	return d, nil
}

// splitReqs reads a comma-joined list of request ids.
func splitReqs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// dueFrom is acquire.lua's per-entity argument naming the due entry a run
// carries out, "claim|tick|reqs", or "" for none.
type dueFrom struct {
	Claim string
	Tick  int64
	Reqs  []string
}

func (f dueFrom) encode() string {
	return f.Claim + "|" + strconv.FormatInt(f.Tick, 10) + "|" + strings.Join(f.Reqs, ",")
}

// nextRun is release.lua's per-lease argument asking for another run,
// "reason|delay_ms|attempt|carry", or "" for none. carry ("1") hands the
// run's request ids on to the next run: the run did not do its work.
type nextRun struct {
	Reason  driver.Reason
	DelayMS int64
	Attempt int64
	Carry   bool
}

func (n nextRun) encode() string {
	return string(n.Reason) + "|" + strconv.FormatInt(n.DelayMS, 10) + "|" + strconv.FormatInt(n.Attempt, 10) + "|" + flag(n.Carry)
}

// epochValue is the epoch key (keys.epoch),
// "quarantine_until|lost_at|run|successors": nothing is granted before
// quarantine_until, and tick runs for ticks before lost_at are refused. It
// is written when acquire finds it missing (Redis lost its data, or is new)
// or on a server that is neither run (the run_id of the server that last
// checked it) nor one of successors (that server's replicas, comma-joined:
// successors.lua); InitEpoch writes the zero value, without a run (so did
// a tickd before it: "quarantine_until|lost_at").
type epochValue struct {
	QuarantineUntil int64
	LostAt          int64
	Run             string   // lower-case hex
	Successors      []string // lower-case hex each
}

func (e epochValue) encode() string {
	v := strconv.FormatInt(e.QuarantineUntil, 10) + "|" + strconv.FormatInt(e.LostAt, 10)
	if e.Run != "" {
		v += "|" + e.Run + "|" + strings.Join(e.Successors, ",")
	}
	return v
}

func decodeEpoch(v string) (epochValue, error) {
	f := strings.Split(v, "|")
	bad := fmt.Errorf("%w: epoch %q", errFormat, v)
	if len(f) != 2 && len(f) != 4 {
		return epochValue{}, bad
	}
	qn, qerr := number(f[0])
	ln, lerr := number(f[1])
	if qerr != nil || lerr != nil {
		return epochValue{}, bad
	}
	ep := epochValue{QuarantineUntil: qn, LostAt: ln}
	if len(f) == 4 {
		if !isHex(f[2]) {
			return epochValue{}, bad
		}
		ep.Run = f[2]
		if f[3] != "" {
			ep.Successors = strings.Split(f[3], ",")
		}
		for _, s := range ep.Successors {
			if !isHex(s) {
				return epochValue{}, bad
			}
		}
	}
	return ep, nil
}

// isHex says whether s is a run_id's form: hex digits, at least one.
func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefABCDEF") == ""
}

// announceValue is a replica's field of the replicas hash (keys.replicas):
// the tasks it runs, until when (Redis's clock), and which process on which
// host with which version, announcing since when and last when; written
// by announce.lua
//
//	until|tasks|process|host|version|since|seen   (tasks escaped, space-joined;
//	                                               host and version escaped)
//
// A value of tickd before the process fields is until|tasks.
func encodeAnnounce(a driver.Announcement) string {
	return strconv.FormatInt(a.Until, 10) + "|" + announceTasks(a) + "|" + a.Process + "|" + driver.Escape(a.Host) + "|" +
		driver.Escape(a.Version) + "|" + strconv.FormatInt(a.Since, 10) + "|" + strconv.FormatInt(a.Seen, 10)
}

func decodeAnnounce(v string) (driver.Announcement, error) {
	bad := fmt.Errorf("%w: announcement %q", errFormat, v)
	f := strings.Split(v, "|")
	if len(f) != 2 && len(f) != 7 {
		return driver.Announcement{}, bad
	}
	n, err := number(f[0])
	if err != nil || f[0] == "" {
		return driver.Announcement{}, bad
	}
	a := driver.Announcement{Until: n}
	for _, t := range strings.Fields(f[1]) {
		task, err := driver.Unescape(t)
		if err != nil {
			return driver.Announcement{}, bad
		}
		a.Tasks = append(a.Tasks, task)
	}
	if len(f) == 2 {
		return a, nil
	}
	a.Process = f[2]
	h, herr := driver.Unescape(f[3])
	ver, verr := driver.Unescape(f[4])
	since, serr := number(f[5])
	seen, seerr := number(f[6])
	if herr != nil || verr != nil || serr != nil || seerr != nil || f[5] == "" || f[6] == "" {
		return driver.Announcement{}, bad
	}
	a.Host, a.Version, a.Since, a.Seen = h, ver, since, seen
	return a, nil
}

// tasksField is the tasks part: announce.lua adds the until part itself,
// from Redis's clock.
func announceTasks(a driver.Announcement) string {
	esc := make([]string, len(a.Tasks))
	for i, t := range a.Tasks {
		esc[i] = driver.Escape(t)
	}
	return strings.Join(esc, " ")
}

// decodeAcquireReply decodes one entity's answer: digits alone are a
// granted fence; otherwise "status|fields…".
func decodeAcquireReply(v string) (driver.AcquireReply, error) {
	status, rest, _ := strings.Cut(v, "|")
	if fence, err := strconv.ParseInt(status, 10, 64); err == nil {
		return driver.AcquireReply{Status: driver.GrantOK, Fence: fence}, nil
	}
	r := driver.AcquireReply{Status: driver.GrantStatus(status)}
	bad := fmt.Errorf("%w: acquire reply %q", errFormat, v)
	switch r.Status {
	case driver.GrantBusy:
		// since|fence|holder, then, when the acquire did more (lib.lua's
		// reply_busy_also), |flag|dropped|missed: flag revocationReplaced
		// when it replaced the holder, the buffered ticks it dropped and
		// missed (ms, comma-joined).
		f := strings.Split(rest, "|")
		if len(f) == 6 {
			var e1, e2 error
			r.Replaced = f[3] == revocationReplaced
			r.Dropped, e1 = msTimes(f[4])
			r.Missed, e2 = msTimes(f[5])
			if e1 != nil || e2 != nil {
				return r, bad
			}
			f = f[:3]
		}
		if len(f) != 3 {
			return r, bad
		}
		since, e1 := number(f[0])
		fence, e2 := number(f[1])
		holder, e3 := driver.Unescape(f[2])
		if errors.Join(e1, e2, e3) != nil {
			return r, bad
		}
		r.At, r.Fence, r.Holder = driver.MSTime(since), fence, holder
	case driver.GrantRan:
		n, err := number(rest)
		if err != nil {
			return r, bad
		}
		r.At = driver.MSTime(n)
	case driver.GrantQuarantine, driver.GrantEarly:
		rest, _ = strings.CutSuffix(rest, "|"+lossFound) // the caller's (spreadLoss)
		n, err := number(rest)
		if err != nil {
			return r, bad
		}
		r.Left = time.Duration(n) * time.Millisecond
	default:
		return r, bad
	}
	return r, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// msTimes reads comma-joined Unix milliseconds ("" for none).
func msTimes(s string) ([]time.Time, error) {
	if s == "" {
		return nil, nil
	}
	var ts []time.Time
	for f := range strings.SplitSeq(s, ",") {
		n, err := number(f)
		if err != nil {
			return nil, err
		}
		ts = append(ts, driver.MSTime(n))
	}
	return ts, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// unixMS and msTime convert between times and the Unix milliseconds stored
// in Redis, where 0 stands for the zero time.
func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return driver.MSTime(n)
}

func tickMS(t time.Time) string { return strconv.FormatInt(unixMS(t), 10) }
