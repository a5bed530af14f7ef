package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tickd/tickd/lease/driver"
)

// decoder fills config structs from decoded TOML tables key by key, so that
// every mistake of a file is found in one pass: a key it does not know, a
// value of the wrong type, a bad duration. The structs' toml tags are the
// one list of keys; validation reports through the same decoder.
type decoder struct {
	path   string
	pos    positions
	errs   []*Error
	failed keySet // keys whose value could not be decoded
	// beats maps the heartbeat URLs of the tasks so far to their index:
	// two tasks' pings in one check would hide either's silence.
	beats map[string]int
}

// keySet is a set of key names or paths.
type keySet map[string]bool

func newDecoder(path string, data []byte) *decoder {
	return &decoder{path: path, pos: indexPositions(data), failed: keySet{}, beats: map[string]int{}}
}

// bad reports a mistake at key (a dotted path, tasks[2].every). A key whose
// value could not be decoded has been reported already: validation's
// complaints about the default left in its place would only mislead.
func (d *decoder) bad(key, format string, args ...any) {
	if d.failed[key] {
		return
	}
	d.errs = append(d.errs, &Error{File: d.path, Line: d.pos.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// failedUnder says whether a key under table path failed to decode.
func (d *decoder) failedUnder(path string) bool {
	for k := range d.failed {
		if strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}

// err joins every mistake, in the order of the file.
func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int { return a.Line - b.Line })
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// table decodes the TOML table raw, at path, over dst (a pointer to a struct
// whose fields carry toml tags), key by key, and returns the keys given.
func (d *decoder) table(path string, raw any, dst any) keySet {
	given := keySet{}
	m, ok := raw.(map[string]any)
	if !ok {
		d.bad(path, "want a table, got %s", describe(raw))
		return given
	}
	v := reflect.ValueOf(dst).Elem()
	fs := fieldsOf(v.Type())
	for _, k := range sortedKeys(m) {
		key := path + "." + k
		i, ok := fs.index[k]
		if !ok {
			d.unknown(key, m[k], fs.names)
			continue
		}
		given[k] = true
		if err := set(v.Field(i), m[k]); err != nil {
			d.bad(key, "%v", err)
			d.failed[key] = true
		}
	}
	return given
}

// unknown reports a key no table has, with the closest known name.
func (d *decoder) unknown(key string, val any, known []string) {
	name := key[strings.LastIndexByte(key, '.')+1:]
	hint := ""
	if s := closest(name, known); s != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
		// The key meant is missing for that reason alone: validation
		// must not report it missing too.
		d.failed[key[:len(key)-len(name)]+s] = true
	} else if slices.Contains(fieldsOf(reflect.TypeFor[Task]()).names, name) {
		hint = " (a task key: give it in [defaults] or a [[tasks]] entry)"
	}
	if sub, ok := val.(map[string]any); ok && !strings.Contains(key, ".") {
		// An unknown table: each of its keys is unknown there.
		for _, k := range sortedKeys(sub) {
			d.bad(key+"."+k, "unknown key: no table [%s]%s", key, hint)
		}
		return
	}
	d.bad(key, "unknown key%s", hint)
}

// fields maps the toml names of a struct's fields to their index.
type fields struct {
	index map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type → fields

func fieldsOf(t reflect.Type) fields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(fields)
	}
	f := fields{index: map[string]int{}}
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("toml")
		if name == "" || name == "-" {
			continue
		}
		f.index[name] = i
		f.names = append(f.names, name)
	}
	fieldCache.Store(t, f)
	return f
}

// keys lists the keys of a config table struct (Daemon, Redis, Task), as
// their toml tags declare them.
func keys[T any]() []string { return slices.Clone(fieldsOf(reflect.TypeFor[T]()).names) }

var (
	durationType = reflect.TypeFor[time.Duration]()
	acksType     = reflect.TypeFor[driver.ReplicaAcks]()
)

// replicaAcks decodes replica_acks: "auto", or a number of replicas (0:
// never wait).
func replicaAcks(val any) (driver.ReplicaAcks, error) {
	switch v := val.(type) {
	case string:
		if v == "auto" {
			return driver.AcksAuto, nil
		}
	case int64:
		switch {
		case v == 0:
			return driver.AcksNever, nil
		case v > 0:
			return driver.ReplicaAcks(v), nil
		}
	}
	return 0, fmt.Errorf("want \"auto\" or a number of replicas (0: never wait), got %s", describe(val))
}

// set stores a decoded TOML value into a field of one of the kinds config
// structs use: a duration (written as "90s"), a string, an integer, a
// boolean, a list of strings.
func set(f reflect.Value, val any) error {
	switch {
	case f.Type() == acksType:
		n, err := replicaAcks(val)
		if err != nil {
			return err
		}
		f.SetInt(int64(n))
	case f.Type() == durationType:
		v, err := duration(val)
		if err != nil {
			return err
		}
		f.SetInt(int64(v))
	case f.Kind() == reflect.String:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", describe(val))
		}
		f.SetString(s)
	case f.Kind() == reflect.Int:
		n, ok := val.(int64)
		if !ok {
			return fmt.Errorf("want an integer, got %s", describe(val))
		}
		f.SetInt(n)
	case f.Kind() == reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			return fmt.Errorf("want true or false, got %s", describe(val))
		}
		f.SetBool(b)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		out, err := stringList(val)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(out))
	case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String && f.Type().Elem().Kind() == reflect.String:
		out, err := stringTable(val)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("tickd cannot decode a %s field", f.Type()) // a config struct gained a field of a new kind
	}
	return nil
}

// duration decodes a duration written as "90s".
func duration(val any) (time.Duration, error) {
	s, ok := val.(string)
	if !ok {
		return 0, fmt.Errorf("want a duration such as \"90s\" or \"15m\", got %s", describe(val))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (use e.g. \"90s\", \"15m\", \"2h\")", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return v, nil
}

// stringList decodes a list of strings.
func stringList(val any) ([]string, error) {
	xs, ok := val.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of strings, got %s", describe(val))
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		if out[i], ok = x.(string); !ok {
			return nil, fmt.Errorf("want a list of strings, element %d is %s", i, describe(x))
		}
	}
	return out, nil
}

// stringTable decodes a table of strings such as { Name = "value" }.
func stringTable(val any) (map[string]string, error) {
	m, ok := val.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a table of strings such as { Name = \"value\" }, got %s", describe(val))
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		if out[k], ok = x.(string); !ok {
			return nil, fmt.Errorf("want a table of strings, %s is %s", k, describe(x))
		}
	}
	return out, nil
}

// describe names a decoded TOML value's type, and the value when short.
func describe(val any) string {
	switch v := val.(type) {
	case string:
		if len(v) > 40 {
			return "a string"
		}
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case time.Time:
		return "a date-time"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", val)
}

// closest returns the known name within two edits of name, if any.
func closest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
