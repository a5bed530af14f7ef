package listen

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// CheckBasePath says what is wrong with a console's base path, if
// anything: "" or "/" followed by path segments of letters, digits and
// "-._~", none of them "." or "..", and no "/" at the end.
func CheckBasePath(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return errors.New(`want "" or a path such as "/tickd": a leading "/" and none at the end`)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("segment %q: want a name (not empty, \".\" or \"..\")", seg)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
				return fmt.Errorf("segment %q: %q is not a letter, digit or one of -._~", seg, r)
			}
		}
	}
	return nil
}

// Loopback says whether the address host:port listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
