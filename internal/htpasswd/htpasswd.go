// Package htpasswd reads the console's users: an htpasswd file of bcrypt
// entries (htpasswd -B). The config's validation and the console read it
// with the same rules, so tickd check refuses what tickd run refuses.
package htpasswd

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/tickd/tickd/internal/regular"
)

// MaxFile bounds an htpasswd file: a regular file of at most 1 MiB.
const MaxFile = 1 << 20

// Users are the file's users and their bcrypt hashes.
type Users map[string][]byte

// Read reads an htpasswd file of bcrypt entries: one user:hash a line;
// blank lines and # comments are skipped. Any other kind of hash is
// refused, with the file and line (tickd compares bcrypt only), and so are
// hashes of different costs: an unknown user is checked against a hash of
// the file's cost, so that a name cannot be told by how long a wrong
// password takes.
func Read(path string) (Users, error) {
	data, err := regular.ReadFile(path, MaxFile)
	if err != nil {
		return nil, err
	}
	us := Users{}
	costs := map[int][]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%s:%d: want user:hash", path, n)
		}
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: not a bcrypt hash (make it with htpasswd -B -C 10)", path, n, user)
		}
		if _, dup := us[user]; dup {
			return nil, fmt.Errorf("%s:%d: user %q given twice", path, n, user)
		}
		us[user] = []byte(hash)
		costs[cost] = append(costs[cost], user)
	}
	if len(us) == 0 {
		return nil, fmt.Errorf("%s: no users", path)
	}
	if len(costs) > 1 {
		var by []string
		for c, names := range costs {
			by = append(by, fmt.Sprintf("cost %d: %s", c, strings.Join(names, ", ")))
		}
		sort.Strings(by)
		return nil, fmt.Errorf("%s: the hashes have different bcrypt costs (%s): make them all with one, e.g. htpasswd -B -C 10, "+
			"so that a user name cannot be told by the time a wrong password takes", path, strings.Join(by, "; "))
	}
	return us, nil
}

// EmptyPasswords lists the users whose password is empty (made with
// htpasswd -bB and an empty argument): one bcrypt comparison per user, so
// it is for a console's start, not for every config load.
func (us Users) EmptyPasswords() []string {
	var out []string
	for u, h := range us {
		if bcrypt.CompareHashAndPassword(h, nil) == nil {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// MaxPassword is the longest password bcrypt compares whole: it ignores
// the bytes after 72, so a longer one is refused rather than matched by
// any suffix.
const MaxPassword = 72

// Cost is the bcrypt cost of the users' hashes (Read makes them all one).
func (us Users) Cost() int {
	for _, h := range us {
		c, _ := bcrypt.Cost(h)
		return c
	}
	return bcrypt.DefaultCost
}
