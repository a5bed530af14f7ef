package house

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goName is a Go name as the changelog writes it: `pkg.Name` or
// `pkg.Type.Member`, pkg the last element of a package's path.
var goName = regexp.MustCompile("`([a-z][a-z0-9]*)\\.([A-Z][A-Za-z0-9]*)(?:\\.([A-Z][A-Za-z0-9]*))?")

// TestChangelogNamesAreTrue: every Go name CHANGELOG.md says exists is in
// the public API at HEAD (api/tickd.txt), but in the sections that say
// what is gone or moved (a heading that begins "Moving", "Removed" or
// "Breaking"): a changelog that presented internal names as added, or
// names long gone, misled the embedder who upgraded by it.
func TestChangelogNamesAreTrue(t *testing.T) {
	data, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	api := map[string][]string{} // by the package's last path element
	for l := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(l, "pkg ")
		if !ok {
			continue
		}
		path, decl, _ := strings.Cut(rest, ", ")
		name := path[strings.LastIndex(path, "/")+1:]
		api[name] = append(api[name], decl)
	}
	f, err := os.Open("../../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exempt := false
	n := 0
	for sc, line := bufio.NewScanner(f), 0; sc.Scan(); {
		line++
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			h := strings.TrimLeft(l, "# ")
			exempt = strings.HasPrefix(h, "Moving") || strings.HasPrefix(h, "Removed") || strings.HasPrefix(h, "Breaking")
			continue
		}
		if exempt {
			continue
		}
		for _, m := range goName.FindAllStringSubmatch(l, -1) {
			if _, public := api[m[1]]; !public && m[1] != "prometheus" && m[1] != "redis" {
				t.Errorf("CHANGELOG.md:%d names %s, of no public package", line, strings.Trim(m[0], "`"))
				continue
			}
			n++
			if !declared(api[m[1]], m[2], m[3]) {
				t.Errorf("CHANGELOG.md:%d names %s, which the public API does not have", line, strings.Trim(m[0], "`"))
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go name found in CHANGELOG.md: the pattern is wrong")
	}
}

// declared says whether decls (a package's API lines) declare name, or
// name's member (a field or a method) when member is not "".
func declared(decls []string, name, member string) bool {
	return slices.ContainsFunc(decls, func(d string) bool {
		if member == "" {
			for _, kind := range []string{"func ", "type ", "var ", "const "} {
				if strings.HasPrefix(d, kind+name+" ") || strings.HasPrefix(d, kind+name+"(") || d == kind+name {
					return true
				}
			}
			return false
		}
		return strings.HasPrefix(d, "type "+name+" struct, "+member+" ") ||
			strings.HasPrefix(d, "type "+name+" interface, "+member+"(") ||
			strings.HasPrefix(d, "method ("+name+") "+member+"(") ||
			strings.HasPrefix(d, "method (*"+name+") "+member+"(")
	})
}
