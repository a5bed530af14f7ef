package memdriver

import (
	"cmp"
	"math"
	"slices"

	"github.com/tickd/tickd/lease/driver"
)

// fairLine is a fair limit's line for one budget key: limit.lua's fair
// keys. Its runs' places (since) are the limit's line's; this is their
// groups and the groups' turns.
type fairLine struct {
	tags   map[string]float64 // the groups with runs waiting → their next start's virtual time
	size   map[string]int     // … → how many
	weight map[string]int     // group → its weight
	member map[string]string  // waiter → its group
	left   map[string]float64 // group → its tag when it had none left waiting
	vt     float64            // the virtual time: the last start's tag
	ranked []groupTurn        // the first groups, read once a call (rank)
}

// groupTurn is a group's turn in the line: its tag, step and runs.
type groupTurn struct {
	g         string
	tag, step float64
	n, at     int
	done      bool
}

func (l *memLimit) fairLine(key string) *fairLine {
	if l.fair == nil {
		l.fair = map[string]*fairLine{}
	}
	f := l.fair[key]
	if f == nil {
		f = &fairLine{tags: map[string]float64{}, size: map[string]int{}, weight: map[string]int{}, member: map[string]string{}, left: map[string]float64{}}
		l.fair[key] = f
	}
	return f
}

// place puts a's waiter in its group: a's, or, not known, the one it has,
// else "".
func (f *fairLine) place(a driver.LimitAsk) {
	had, in := f.member[a.Waiter]
	g := a.Group
	if !a.Grouped {
		g = had // "" when it has none
	}
	if in && had != g {
		f.out(a.Waiter)
		in = false
	}
	if !in {
		f.member[a.Waiter] = g
		f.size[g]++
	}
	if a.Grouped {
		f.weight[g] = max(a.Weight, 1)
	}
	if _, ok := f.tags[g]; !ok {
		f.tags[g] = max(f.vt, f.left[g])
	}
}

// out takes waiter w out of its group.
func (f *fairLine) out(w string) {
	g, ok := f.member[w]
	if !ok {
		return
	}
	delete(f.member, w)
	if f.size[g]--; f.size[g] > 0 {
		return
	}
	delete(f.size, g)
	if tag, ok := f.tags[g]; ok {
		f.left[g] = tag
		delete(f.tags, g)
	}
	if len(f.tags) == 0 {
		f.left, f.vt = map[string]float64{}, 0
	}
}

func (f *fairLine) step(g string) float64 {
	return driver.FairUnit / float64(max(f.weight[g], 1))
}

// turns are the groups with runs waiting in their turns' order, the first
// n of them.
func (f *fairLine) turns(n int) []groupTurn {
	out := make([]groupTurn, 0, len(f.tags))
	for g, tag := range f.tags {
		out = append(out, groupTurn{g: g, tag: tag, step: f.step(g), n: f.size[g]})
	}
	slices.SortFunc(out, func(a, b groupTurn) int { return cmp.Or(cmp.Compare(a.tag, b.tag), cmp.Compare(a.g, b.g)) })
	return out[:min(n, len(out))]
}

// inGroup is group g's runs in line, oldest first (as a zset orders them).
func (f *fairLine) inGroup(line map[string]waiter, g string) []string {
	var ws []string
	for w := range line {
		if f.member[w] == g {
			ws = append(ws, w)
		}
	}
	slices.SortFunc(ws, func(a, b string) int { return cmp.Or(line[a].since.Compare(line[b].since), cmp.Compare(a, b)) })
	return ws
}

// head is the line's first r runs → their group: the groups' runs merged
// by tag, a group's j-th at its tag and j steps, equal tags in the groups'
// order (limit.lua's fair_head).
func (f *fairLine) head(line map[string]waiter, r int) map[string]string {
	head := map[string]string{}
	cand := f.turns(r)
	lines := map[string][]string{}
	for len(head) < r {
		best := -1
		for i, c := range cand {
			if !c.done && (best < 0 || c.tag < cand[best].tag) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		c := &cand[best]
		if lines[c.g] == nil {
			lines[c.g] = f.inGroup(line, c.g)
		}
		if c.at >= len(lines[c.g]) {
			c.done = true
			continue
		}
		head[lines[c.g][c.at]] = c.g
		c.at, c.tag = c.at+1, c.tag+c.step
	}
	return head
}

// rank is at least the number of runs ahead of w: exact over the first 64
// groups, one for each group after them (limit.lua's fair_rank).
func (f *fairLine) rank(line map[string]waiter, w string) int {
	g, ok := f.member[w]
	if !ok {
		return 0
	}
	at := slices.Index(f.inGroup(line, g), w)
	tag := f.tags[g] + float64(at)*f.step(g)
	if f.ranked == nil {
		f.ranked = f.turns(64)
	}
	rank, counted := at, 0
	for _, h := range f.ranked {
		if h.tag < tag {
			counted++
			if h.g != g {
				rank += min(h.n, int(math.Ceil((tag-h.tag)/h.step)))
			}
		}
	}
	below := 0
	for _, t := range f.tags {
		if t < math.RoundToEven(tag) {
			below++
		}
	}
	return rank + max(below-counted, 0)
}

// granted advances group g by one start, and the virtual time to its tag.
func (f *fairLine) granted(g string) {
	tag, ok := f.tags[g]
	if !ok {
		return
	}
	f.tags[g] = math.RoundToEven(tag + f.step(g))
	f.vt = max(f.vt, tag)
}

// callDone forgets what one TakeLimit call read once.
func (f *fairLine) callDone() { f.ranked = nil }
