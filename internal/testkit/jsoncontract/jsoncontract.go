// Package jsoncontract checks a -json document, of the command line or the
// console, against the output contract for scripts (docs/operations.md,
// "Commands"). Tests only.
package jsoncontract

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"
)

// instantKeys are the keys whose values are instants.
var instantKeys = map[string]bool{"next_tick": true, "since": true, "started": true, "ended": true, "last_tick": true, "tick": true, "due_at": true, "last_seen": true,
	"at": true, "until": true, "started_at": true, "ended_at": true, "last_registered": true,
	"cursor": true, "first_tick": true, "created": true}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// Errors lists where a -json document breaks the -json contract
// (docs/operations.md, "Commands"): a key not in snake_case, a _s key that is not a number of
// seconds, an instant that is not RFC 3339 UTC or null, a zero time, a list
// that is null.
func Errors(doc string) []string {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return []string{"not one JSON document: " + err.Error()}
	}
	var errs []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := path + "." + k
				if !snakeCase.MatchString(k) {
					errs = append(errs, p+": key not in snake_case")
				}
				if strings.HasSuffix(k, "_s") {
					if _, ok := e.(float64); !ok {
						errs = append(errs, p+": a _s key holds a number of seconds")
					}
				}
				if instantKeys[k] && e != nil {
					s, _ := e.(string)
					if t, err := time.Parse(time.RFC3339Nano, s); err != nil || !strings.HasSuffix(s, "Z") || t.IsZero() {
						errs = append(errs, p+": an instant is RFC 3339 UTC or null, not "+s)
					}
				}
				if e == nil && !instantKeys[k] {
					errs = append(errs, p+": null (an empty list is [], a missing instant is the only null)")
				}
				walk(p, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		case string:
			if strings.HasPrefix(x, "0001-01-01") {
				errs = append(errs, path+": a zero time")
			}
		}
	}
	walk("", v)
	return errs
}
