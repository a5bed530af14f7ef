package redisdriver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tickd/tickd/lease/driver"
)

// member names one (task, entity) in the due set and inside hash tags.
func member(task, entity string) string { return driver.Escape(task) + ":" + driver.Escape(entity) }

// splitMember reverses member.
func splitMember(m string) (task, entity string, err error) {
	i := strings.IndexByte(m, ':')
	if i < 0 {
		return "", "", fmt.Errorf("lease: bad member %q", m)
	}
	if task, err = driver.Unescape(m[:i]); err != nil {
		return "", "", err
	}
	entity, err = driver.Unescape(m[i+1:])
	return task, entity, err
}

// errFormat is wrapped by every decode error: a value this code does not
// understand (another version's, or damaged) is skipped, never misread.
var errFormat = errors.New("lease: stored value in an unknown format")

// number parses a stored integer; "" (a field left empty) is 0.
func number(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
