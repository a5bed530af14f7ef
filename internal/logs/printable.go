package logs

import (
	"fmt"
	"log/slog"
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

// TerminalSafe is a handler's ReplaceAttr for a log read on a terminal
// (tint): a string's, an error's and the message's runs of text that are
// not printable are written as \uXXXX, so that a run's output or an
// outside answer cannot drive the terminal. (\uXXXX, not \x1b: tint turns
// a quoted \x1b back into ESC for its colours.)
func TerminalSafe(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case string:
		if !printable(v) {
			return slog.String(a.Key, unicodeEscaped(v))
		}
	case error:
		if s := v.Error(); !printable(s) {
			return slog.String(a.Key, unicodeEscaped(s))
		}
	}
	return a
}

func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) })
}

// unicodeEscaped writes each rune of s that is not printable as \uXXXX
// (a byte of invalid UTF-8 as \u00XX).
func unicodeEscaped(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\u%04x`, s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}
