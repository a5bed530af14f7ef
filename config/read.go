package config

import (
	"fmt"

	"github.com/tickd/tickd/internal/regular"
)

// The bounds of a config file, checked before the TOML parser sees it: a
// file far larger, or nested far deeper, than any config is a mistake or
// an attack (a 400 KB file of nested arrays took the parser 18.6 GB and a
// minute).
const (
	maxConfigBytes = 4 << 20
	maxNesting     = 16
)

// ReadFile reads path, a regular file, without blocking: a FIFO, a
// device or a directory at the path is refused at once (opening a FIFO to
// read waits for a writer for ever, and held up reloads and SIGTERM).
func ReadFile(path string) ([]byte, error) {
	data, err := readRegular(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if line, err := checkNesting(data); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, line, err)
	}
	return data, nil
}

// readRegular reads path, a regular file of at most max bytes, without
// blocking (a FIFO's open waits for a writer): the config, and the files
// it names for a secret (url_file).
func readRegular(path string, max int) ([]byte, error) {
	return regular.ReadFile(path, int64(max))
}

// errTooDeep: arrays and inline tables nested deeper than maxNesting.
var errTooDeep = fmt.Errorf("arrays or inline tables nested deeper than %d: not a config tickd reads", maxNesting)

// checkNesting finds, outside strings and comments, where arrays and
// inline tables nest deeper than maxNesting, and the line.
func checkNesting(data []byte) (int, error) {
	depth, line := 0, 1
	comment := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			line++
			comment = false
		case comment:
		case c == '"' || c == '\'':
			end, lines := stringEnd(data, i)
			i, line = end, line+lines
		case c == '#':
			comment = true
		case c == '[' || c == '{':
			if depth++; depth > maxNesting {
				return line, errTooDeep
			}
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
		}
	}
	return 0, nil
}

// stringEnd finds the end of the string that opens at data[i] (a quote):
// the index of its last byte, and the line breaks inside it. A multi-line
// string (opened by three quotes, double or single) ends at three quotes
// (up to two more before them are the string's); a one-line string at its
// quote or its line's end (the parser says what is wrong). Only a basic
// string (") escapes.
func stringEnd(data []byte, i int) (end, lines int) {
	q := data[i]
	triple := i+2 < len(data) && data[i+1] == q && data[i+2] == q
	if triple {
		i += 2
	}
	for i++; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n' && !triple:
			return i - 1, 0 // the line break is the caller's to count
		case c == '\n':
			lines++
		case c == '\\' && q == '"' && i+1 < len(data) && data[i+1] != '\n':
			i++ // an escaped character (a line's end is counted)
		case c == q && !triple:
			return i, lines
		case c == q && i+2 < len(data) && data[i+1] == q && data[i+2] == q:
			for i+1 < len(data) && data[i+1] == q {
				i++
			}
			return i, lines
		}
	}
	return len(data), lines
}
