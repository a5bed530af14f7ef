package config

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// positions maps dotted keys ("daemon.log_level", "tasks[2].every") to the
// line they are written on. The TOML library keeps key positions to itself,
// so this reads the file's table headers and "key =" lines; it only serves
// error messages, and a key it cannot place gets no line.
type positions struct {
	lines  map[string]int
	tables map[string]int // "tasks[2]" → header line
	counts map[string]int // array table → entries so far
}

var (
	headerRE = regexp.MustCompile(`^\s*(\[\[?)\s*([A-Za-z0-9_.\-" ]+?)\s*\]\]?\s*(#.*)?$`)
	keyRE    = regexp.MustCompile(`^\s*([A-Za-z0-9_\-]+|"[^"]*")\s*=`)
)

func indexPositions(data []byte) positions {
	p := positions{lines: map[string]int{}, tables: map[string]int{}, counts: map[string]int{}}
	table := ""
	depth := 0 // open [ of a multi-line array
	inMulti := ""
	for i, raw := range bytes.Split(data, []byte("\n")) {
		n, line := i+1, string(raw)
		if inMulti != "" { // inside a multi-line string
			if strings.Contains(line, inMulti) {
				inMulti = ""
			}
			continue
		}
		if depth > 0 {
			depth += strings.Count(line, "[") - strings.Count(line, "]")
			continue
		}
		if m := headerRE.FindStringSubmatch(line); m != nil {
			name := strings.ReplaceAll(m[2], " ", "")
			if m[1] == "[[" {
				idx := p.counts[name]
				p.counts[name]++
				table = fmt.Sprintf("%s[%d]", name, idx)
			} else {
				table = name
			}
			p.tables[table] = n
			continue
		}
		if m := keyRE.FindStringSubmatch(line); m != nil {
			key := strings.Trim(m[1], `"`)
			full := key
			if table != "" {
				full = table + "." + key
			}
			p.lines[full] = n
			rest := line[len(m[0]):]
			for _, q := range []string{`"""`, `'''`} {
				if strings.Count(rest, q) == 1 {
					inMulti = q
				}
			}
			if d := strings.Count(rest, "[") - strings.Count(rest, "]"); d > 0 {
				depth = d
			}
		}
	}
	return p
}

// line returns the line of key, or of its table, or 0.
func (p positions) line(key string) int {
	if n, ok := p.lines[key]; ok {
		return n
	}
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return p.tables[key[:i]]
	}
	if n, ok := p.tables[key]; ok {
		return n
	}
	return p.tables[key+"[0]"] // an array of tables: its first entry
}
