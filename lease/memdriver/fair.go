package memdriver

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// fairLine is a fair limit's line for one budget key: limit.lua's fair
// keys. Its runs' places (since) are the limit's line's; this is their
// groups and the groups' turns.
type fairLine struct {
	tags   map[string]float64       // the groups with runs waiting → their next start's virtual time
	size   map[string]int           // … → how many
	weight map[string]int           // group → its weight
	member map[string]string        // waiter → its group
	known  map[string]string        // a waiter gone from the line (its wait passed) → its group
	left   map[string]float64       // group → its tag when it had none left waiting
	vt     float64                  // the virtual time: the last start's tag
	ranked []groupTurn              // the first groups, read once a call (rank)
	starts map[int64]map[string]int // span (StartsWindow/StartsBuckets) → group → starts
	began  map[string]time.Time     // the groups with runs waiting → since when
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
func (f *fairLine) place(a driver.LimitAsk, now time.Time) {
	had, in := f.member[a.Waiter]
	g := a.Group
	switch {
	case a.Grouped:
	case in:
		g = had
	default:
		g = f.known[a.Waiter] // "" when it has none
	}
	delete(f.known, a.Waiter)
	if in && had != g {
		f.out(a.Waiter, false)
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
		if f.began == nil {
			f.began = map[string]time.Time{}
		}
		f.began[g] = now.Truncate(time.Millisecond)
	}
}

// out takes waiter w out of its group; keep keeps its group for when it
// asks again not knowing it.
func (f *fairLine) out(w string, keep bool) {
	g, ok := f.member[w]
	if !ok {
		if !keep {
			delete(f.known, w)
		}
		return
	}
	delete(f.member, w)
	if keep {
		if f.known == nil {
			f.known = map[string]string{}
		}
		f.known[w] = g
	}
	if f.size[g]--; f.size[g] > 0 {
		return
	}
	delete(f.size, g)
	if tag, ok := f.tags[g]; ok {
		f.left[g] = tag
		delete(f.tags, g)
		delete(f.began, g)
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

// granted advances group g by one start, and the virtual time to its tag;
// the start counts in g's starts (at now) for status.
func (f *fairLine) granted(g string, now time.Time) {
	tag, ok := f.tags[g]
	if !ok {
		return
	}
	span := now.UnixMilli() / bucketMs
	if f.starts == nil {
		f.starts = map[int64]map[string]int{}
	}
	if f.starts[span] == nil {
		f.starts[span] = map[string]int{}
	}
	f.starts[span][g]++
	for at := range f.starts {
		if at < span-driver.StartsBuckets {
			delete(f.starts, at)
		}
	}
	f.tags[g] = math.RoundToEven(tag + f.step(g))
	f.vt = max(f.vt, tag)
}

// callDone forgets what one TakeLimit call read once.
func (f *fairLine) callDone() { f.ranked = nil }

var bucketMs = (driver.StartsWindow / driver.StartsBuckets).Milliseconds()

// state fills st's groups: limit.lua's keys as redisdriver reads them.
func (f *fairLine) state(line map[string]waiter, now time.Time, st *driver.LimitState) {
	st.GroupsWaiting = len(f.tags)
	span, r := now.UnixMilli()/bucketMs, now.UnixMilli()%bucketMs
	started := map[string]int{}
	for i := range int64(driver.StartsBuckets + 1) {
		for g, k := range f.starts[span-i] {
			if i == driver.StartsBuckets {
				k = k * int(time.Duration(bucketMs-r)*time.Millisecond) / int(time.Duration(bucketMs)*time.Millisecond)
			}
			started[g] += k
			st.Starts += k
		}
	}
	for _, turn := range f.turns(driver.MaxGroups) {
		lg := driver.LimitGroup{Name: turn.g, Waiting: turn.n, Weight: max(f.weight[turn.g], 1), Started: started[turn.g], Since: f.began[turn.g]}
		if ws := f.inGroup(line, turn.g); len(ws) > 0 {
			lg.Oldest = line[ws[0]].since.Truncate(time.Millisecond)
		}
		st.Groups = append(st.Groups, lg)
	}
}
