package logs

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable is outside text made fit for a log line: every rune that is
// not printable (ESC, BEL, a bidi override, invalid UTF-8) written as its
// Go escape, and the whole cut to about max bytes, saying how many more
// there were. A terminal that shows the line then shows what was sent, and
// cannot be driven by it.
func Printable(s string, max int) string {
	more := 0
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, more = s[:cut], len(s)-cut
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) {
		var b strings.Builder
		for i, r := range s {
			if r == utf8.RuneError {
				if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
					b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
					continue
				}
			}
			if unicode.IsPrint(r) {
				b.WriteRune(r)
				continue
			}
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = b.String()
	}
	if more > 0 {
		s += "… (" + strconv.Itoa(more) + " bytes more)"
	}
	return s
}
