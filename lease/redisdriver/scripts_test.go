package redisdriver

import (
	"regexp"
	"slices"
	"testing"
)

// TestScriptsNameTheirArguments: a script reads its arguments by the names
// its argv declares (A_*, E_*), never by a number, and an argv's positions
// are 0, 1, 2… in order, so that a name and the Go constant it stands for
// cannot drift apart.
func TestScriptsNameTheirArguments(t *testing.T) {
	scripts := map[string]argv{"acquire": acquireArgs, "renew": renewArgs, "release": releaseArgs, "enqueue": enqueueArgs,
		"take": takeArgs, "ack": ackArgs, "unlock": unlockArgs, "sweep": sweepArgs, "announce": announceArgs,
		"known": knownArgs, "epoch": epochArgs, "probe": probeArgs, "successors": successorsArgs, "raiselost": raiseLostArgs, "setlayout": setLayoutArgs, "tick": tickArgs,
		"limit": limitArgs, "settle": settleArgs, "close": closeArgs}
	byNumber := regexp.MustCompile(`ARGV\[\s*(\d|b\s*\]|b\s*[+-]\s*\d)`)
	named := regexp.MustCompile(`\b[AE]_[A-Z_]+\b`)
	for name, a := range scripts {
		body := luaFile(name)
		if m := byNumber.FindString(body); m != "" {
			t.Errorf("%s.lua reads %q: by a number, not a name", name, m)
		}
		declared := []string{"A_FIXED"}
		for _, f := range a.fixed {
			declared = append(declared, "A_"+f.name)
		}
		for _, e := range a.each {
			declared = append(declared, "E_"+e.name)
		}
		if len(a.each) > 0 {
			declared = append(declared, "E_STRIDE")
		}
		for _, used := range named.FindAllString(body, -1) {
			if !slices.Contains(declared, used) {
				t.Errorf("%s.lua reads %s, which its argv does not declare", name, used)
			}
		}
		for _, part := range [][]arg{a.fixed, a.each} {
			for i, x := range part {
				if x.pos != i {
					t.Errorf("%s: %s at position %d, listed %d-th", name, x.name, x.pos, i)
				}
			}
		}
	}
}
