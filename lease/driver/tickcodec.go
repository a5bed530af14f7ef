package driver

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// PartKey is what a tick record knows a part by, the first field of its
// encoding: the escaped replica id and, when set, "~" and the process (no
// escaped id holds '~'). A part replaces the earlier one with its key.
func PartKey(p TickPart) string {
	if p.Process == "" {
		return Escape(p.Replica)
	}
	return Escape(p.Replica) + "~" + Escape(p.Process)
}

// EncodeTickPart encodes one replica's part of a tick record. The element
// of a task's tick list (prefix:{NN}:TASK:ticks, newest first):
//
//	tickMs part part…        separated by spaces, one part per replica process
//	part: key|state|written|entities|started|first|last|outcomes|skipped|src
//
// key is PartKey's (the replica escaped, then ~ and the process); state f
// (final) or r (runs going on); written in Unix
// ms; first and last in ms from the tick (” for none); outcomes and
// skipped as name=n,name=n; src 1 when the source failed, then ":" and its
// error, escaped, when it is known. Lua (tick.lua)
// reads only the tick and each part's key, to put a part in place.
func EncodeTickPart(p TickPart) string {
	var b strings.Builder
	b.WriteString(PartKey(p))
	b.WriteString(map[bool]string{true: "|f|", false: "|r|"}[p.Final])
	b.WriteString(strconv.FormatInt(p.Written.UnixMilli(), 10))
	for _, n := range []int{p.Entities, p.Started} {
		b.WriteByte('|')
		b.WriteString(strconv.Itoa(n))
	}
	for _, d := range []time.Duration{p.FirstStart, p.LastEnd} {
		b.WriteByte('|')
		if d >= 0 {
			b.WriteString(strconv.FormatInt(d.Milliseconds(), 10))
		}
	}
	b.WriteByte('|')
	writeCounts(&b, p.Outcomes)
	b.WriteByte('|')
	writeCounts(&b, p.Skipped)
	b.WriteString(map[bool]string{true: "|1", false: "|"}[p.SourceFailed])
	if p.SourceFailed && p.SourceError != "" {
		b.WriteByte(':')
		b.WriteString(Escape(cutAt(p.SourceError, MaxSourceError)))
	}
	return b.String()
}

func writeCounts[K ~string](b *strings.Builder, m map[K]int) {
	ks := slices.Sorted(maps.Keys(m))
	first := true
	for _, k := range ks {
		if m[k] == 0 {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(Escape(string(k)))
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
	}
}

func readCounts[K ~string](s string) (map[K]int, error) {
	m := map[K]int{}
	if s == "" {
		return m, nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return nil, fmt.Errorf("lease: bad count %q", kv)
		}
		name, err := Unescape(k)
		if err != nil {
			return nil, err
		}
		m[K(name)] = n
	}
	return m, nil
}

func decodeTickPart(s string) (TickPart, error) {
	f := strings.Split(s, "|")
	if len(f) != 10 {
		return TickPart{}, fmt.Errorf("lease: bad tick part %q", s)
	}
	var p TickPart
	var err error
	rep, proc, _ := strings.Cut(f[0], "~")
	if p.Replica, err = Unescape(rep); err != nil {
		return p, err
	}
	p.Process = proc
	p.Final = f[1] == "f"
	written, err1 := Number(f[2])
	entities, err2 := strconv.Atoi(f[3])
	started, err3 := strconv.Atoi(f[4])
	p.Written, p.Entities, p.Started = MSTime(written), entities, started
	p.FirstStart, p.LastEnd = -1, -1
	for i, d := range []*time.Duration{&p.FirstStart, &p.LastEnd} {
		if f[5+i] == "" {
			continue
		}
		n, err := Number(f[5+i])
		if err != nil {
			return p, err
		}
		*d = time.Duration(n) * time.Millisecond
	}
	if p.Outcomes, err = readCounts[Outcome](f[7]); err != nil {
		return p, err
	}
	if p.Skipped, err = readCounts[string](f[8]); err != nil {
		return p, err
	}
	src, srcErr, _ := strings.Cut(f[9], ":")
	p.SourceFailed = src == "1"
	if p.SourceError, err = Unescape(srcErr); err != nil {
		return p, fmt.Errorf("lease: bad tick part %q: %w", s, err)
	}
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return p, fmt.Errorf("lease: bad tick part %q: %w", s, err)
		}
	}
	return p, nil
}

func DecodeTickRecord(el string) (TickRecord, error) {
	f := strings.Split(el, " ")
	tick, err := Number(f[0])
	if err != nil {
		return TickRecord{}, fmt.Errorf("lease: bad tick record %q", el)
	}
	r := TickRecord{Tick: MSTime(tick)}
	for _, s := range f[1:] {
		p, err := decodeTickPart(s)
		if err != nil {
			return r, err
		}
		r.Parts = append(r.Parts, p)
	}
	return r, nil
}

// MergeTickPart puts part (of replica, escaped) into the tick list element
// el, over that replica's earlier part: tick.lua's merge, for the
// in-process store.
func MergeTickPart(el, replica, part string) string {
	f := strings.Split(el, " ")
	for i, p := range f[1:] {
		if strings.HasPrefix(p, replica+"|") {
			f[1+i] = part
			return strings.Join(f, " ")
		}
	}
	return el + " " + part
}

// TickScan is how many of a task's newest tick records a write looks
// through for its tick: a part for an older tick is too late, and dropped.
const TickScan = 32

// TickAgeDrop is how many records older than the retention's age a write
// drops at most, oldest first (the rest go with later writes, or with the
// list's expiry): a write's cost stays bounded however long the list was
// left alone.
const TickAgeDrop = 16

// CutError cuts a run's error to MaxRunError bytes, at a rune's start.
func CutError(s string) string { return cutAt(s, MaxRunError) }

// MaxSourceError bounds the error of a failed entity source that a tick's
// record keeps.
const MaxSourceError = 1024

// cutAt is s's first max bytes, cut at a rune's start.
func cutAt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// DecodeTickRecords decodes a driver's stored tick records (each the
// records of EncodeTickPart's parts that MergeTickPart joined), leaving out
// any it cannot read: another version's.
func DecodeTickRecords(els []string) []TickRecord {
	rs := make([]TickRecord, 0, len(els))
	for _, el := range els {
		if r, err := DecodeTickRecord(el); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}
