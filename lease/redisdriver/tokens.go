package redisdriver

import (
	"strconv"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// What the scripts are sent of a lease: its entity's field and its token.

// fieldArg is the script argument of an entity's field in its task's
// hash, Escape(*entity): a pointer to the entity's id when escaping leaves
// it as it is (go-redis boxes a string with an allocation, a pointer
// without), the escaped id else.
func fieldArg(entity *string) any {
	if f := driver.Escape(*entity); f != *entity {
		return f
	}
	return entity
}

// chunkPrefix is the prefix the tokens of a chunk's m requests share, P.
// in P.1, P.2, … (driver.AcquireArg.Token), when they are so: the script
// makes the j-th (between its separators) of the prefix and POSITION[j].
func chunkPrefix(tokens func(k int) string, m int) (string, bool) {
	prefix, ok := strings.CutSuffix(tokens(0), ".1")
	if !ok {
		return "", false
	}
	prefix += "."
	var num [20]byte
	for k := 1; k < m; k++ {
		rest, ok := strings.CutPrefix(tokens(k), prefix)
		if !ok || rest != string(strconv.AppendInt(num[:0], int64(k+1), 10)) {
			return "", false
		}
	}
	return prefix, true
}

// barred is the tokens token(k), k < n, each between the separators the
// scripts find a lease's token by in its value ('|' .. token .. '|':
// lib.lua's unbar), cut from one string.
func barred(n int, token func(k int) string) []string {
	size := 0
	for k := range n {
		size += len(token(k)) + 2
	}
	var b strings.Builder
	b.Grow(size)
	for k := range n {
		b.WriteByte('|')
		b.WriteString(token(k))
		b.WriteByte('|')
	}
	all, out := b.String(), make([]string, n)
	at := 0
	for k := range n {
		end := at + len(token(k)) + 2
		out[k], at = all[at:end], end
	}
	return out
}
