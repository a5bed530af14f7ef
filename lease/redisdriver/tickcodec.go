package redisdriver

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// partKey is what a tick record knows a part by, the first field of its
// encoding: the escaped replica id and, when set, "~" and the process (no
// escaped id holds '~'). A part replaces the earlier one with its key.
func partKey(p driver.TickPart) string {
	if p.Process == "" {
		return driver.Escape(p.Replica)
	}
	return driver.Escape(p.Replica) + "~" + driver.Escape(p.Process)
}

// encodeTickPart encodes one replica's part of a tick record. The element
// of a task's tick list (prefix:{NN}:TASK:ticks, newest first):
//
//	tickMs part part…        separated by spaces, one part per replica process
//	part: key|state|written|entities|started|first|last|outcomes|skipped|src[|zones]
//
// key is partKey's (the replica escaped, then ~ and the process); state f
// (final) or r (runs going on); written in Unix
// ms; first and last in ms from the tick (” for none); outcomes and
// skipped as name=n,name=n; src 1 when the source failed, then ":" and its
// error, escaped, when it is known; zones, for a part that served zones
// of their own (timezone_from) only, their names escaped, comma-joined (a
// tickd before them reads no such part). Lua (tick.lua)
// reads only the tick and each part's key, to put a part in place.
func encodeTickPart(p driver.TickPart) string {
	var b strings.Builder
	b.WriteString(partKey(p))
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
		b.WriteString(driver.Escape(p.SourceError))
	}
	sep := byte('|') // an eleventh field, only for a part with zones
	for _, z := range p.Zones {
		b.WriteByte(sep)
		b.WriteString(driver.Escape(z))
		sep = ','
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
		b.WriteString(driver.Escape(string(k)))
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
		name, err := driver.Unescape(k)
		if err != nil {
			return nil, err
		}
		m[K(name)] = n
	}
	return m, nil
}

func decodeTickPart(s string) (driver.TickPart, error) {
	f := strings.Split(s, "|")
	if len(f) != 10 && len(f) != 11 {
		return driver.TickPart{}, fmt.Errorf("lease: bad tick part %q", s)
	}
	var p driver.TickPart
	var err error
	rep, proc, _ := strings.Cut(f[0], "~")
	if p.Replica, err = driver.Unescape(rep); err != nil {
		return p, err
	}
	p.Process = proc
	p.Final = f[1] == "f"
	written, err1 := number(f[2])
	entities, err2 := strconv.Atoi(f[3])
	started, err3 := strconv.Atoi(f[4])
	p.Written, p.Entities, p.Started = driver.MSTime(written), entities, started
	p.FirstStart, p.LastEnd = -1, -1
	for i, d := range []*time.Duration{&p.FirstStart, &p.LastEnd} {
		if f[5+i] == "" {
			continue
		}
		n, err := number(f[5+i])
		if err != nil {
			return p, err
		}
		*d = time.Duration(n) * time.Millisecond
	}
	if p.Outcomes, err = readCounts[driver.Outcome](f[7]); err != nil {
		return p, err
	}
	if p.Skipped, err = readCounts[string](f[8]); err != nil {
		return p, err
	}
	if len(f) == 11 {
		for z := range strings.SplitSeq(f[10], ",") {
			name, err := driver.Unescape(z)
			if err != nil || name == "" {
				return p, fmt.Errorf("lease: bad tick part %q", s)
			}
			p.Zones = append(p.Zones, name)
		}
	}
	src, srcErr, _ := strings.Cut(f[9], ":")
	p.SourceFailed = src == "1"
	if p.SourceError, err = driver.Unescape(srcErr); err != nil {
		return p, fmt.Errorf("lease: bad tick part %q: %w", s, err)
	}
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return p, fmt.Errorf("lease: bad tick part %q: %w", s, err)
		}
	}
	return p, nil
}

func decodeTickRecord(el string) (driver.TickRecord, error) {
	f := strings.Split(el, " ")
	tick, err := number(f[0])
	if err != nil {
		return driver.TickRecord{}, fmt.Errorf("lease: bad tick record %q", el)
	}
	r := driver.TickRecord{Tick: driver.MSTime(tick)}
	for _, s := range f[1:] {
		p, err := decodeTickPart(s)
		if err != nil {
			return r, err
		}
		r.Parts = append(r.Parts, p)
	}
	return r, nil
}

// decodeTickRecords decodes a driver's stored tick records (each the
// records of encodeTickPart's parts that MergeTickPart joined), leaving out
// any it cannot read: another version's.
func decodeTickRecords(els []string) []driver.TickRecord {
	rs := make([]driver.TickRecord, 0, len(els))
	for _, el := range els {
		if r, err := decodeTickRecord(el); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}
