package redisdriver

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/redistest"
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

// TestScriptsDefineWhatTheyUse: each script (every lua file but the
// libraries) is put together with the library definitions it uses
// (usedOf) and no others: a name the library defines that a kept line
// of code names is defined too, the script compiles on a real Redis, and
// a release by grant defines a fifth of the library's functions at most.
func TestScriptsDefineWhatTheyUse(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Addr)
	libs := luaFile("lib") + luaFile("chunk")
	defined := func(src string) map[string]bool {
		out := map[string]bool{}
		for _, line := range strings.Split(src, "\n") {
			if m := luaDefined.FindStringSubmatch(line); m != nil {
				out[m[1]] = true
				for _, d := range strings.Split(m[2], ",") {
					out[strings.TrimSpace(d)] = true
				}
			}
		}
		return out
	}
	inLib := defined(libs)
	files, err := luaFiles.ReadDir("lua")
	must(t, "the lua files", err)
	for _, f := range files {
		name := strings.TrimSuffix(f.Name(), ".lua")
		if name == "lib" || name == "chunk" {
			continue
		}
		source, ok := scriptSources[name]
		if !ok {
			t.Errorf("%s.lua is no script (newScript)", name)
			continue
		}
		src := source()
		has := defined(src)
		for _, w := range luaWord.FindAllString(luaComment.ReplaceAllString(src, ""), -1) {
			if inLib[w] && !has[w] {
				t.Errorf("%s names %s, which it does not define", name, w)
			}
		}
		if err := c.ScriptLoad(bg, src).Err(); err != nil {
			t.Errorf("%s does not compile: %v", name, err)
		}
	}
	all, some := strings.Count(libs, "\nlocal function "), strings.Count(scriptSources["grantrelease"](), "\nlocal function ")
	expect.True(t, fmt.Sprintf("a release by grant defines %d of the library's %d functions", some, all), some*5 <= all)
}
