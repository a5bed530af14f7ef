package report

import (
	"strconv"
	"strings"
	"unicode"
)

// Visible is s with what cannot be seen shown as an escape: control
// characters (a newline in an entity id), format characters (a
// right-to-left override that would reorder what follows) and bad bytes.
// Text output and the console show text from another's hands so (an id,
// an error, an output line, a reason): it stays one line that cannot move
// a terminal's cursor or forge a line; the console's unlock is confirmed
// with an id typed in this form.
func Visible(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}
