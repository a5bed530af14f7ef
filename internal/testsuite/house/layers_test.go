// Package house checks that the repository is laid out as
// docs/development.md draws it.
package house

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tickd/tickd/"

// layerLine is a row of the Layout drawing: a package, what it is, and
// "-> " the packages it may import.
var layerLine = regexp.MustCompile(`^\s*(\S+)\s{2,}.*?(?:->\s*(.+))?$`)

// TestLayersAsDrawn: every shipped package imports only the packages its
// row of docs/development.md's Layout lists ("all below": any row under
// it), and every shipped package has a row.
func TestLayersAsDrawn(t *testing.T) {
	rows, order := drawnLayers(t)
	// Both modules of the workspace: the library's and the binary's.
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../../../...", "../../../cmd/tickd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := shortName(f[0])
		if strings.HasPrefix(pkg, "internal/testkit") || strings.HasPrefix(pkg, "internal/testsuite") || pkg == "cmd/tickd/internal/e2ebench" || pkg == "cmd/tickd/internal/fencesink" || pkg == "deploy/prometheus" || pkg == "packaging" {
			continue // test kit, or tests only
		}
		allowed, ok := rows[pkg]
		if !ok && !leaf(pkg) {
			t.Errorf("%s has no row in docs/development.md's Layout", pkg)
			continue
		}
		for _, imp := range f[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			switch {
			case leaf(pkg):
				t.Errorf("%s is drawn as a leaf but imports %s", pkg, dep)
			case slices.Contains(allowed, "all below"):
				if slices.Index(order, dep) >= 0 && slices.Index(order, dep) <= slices.Index(order, pkg) {
					t.Errorf("%s imports %s, which is not below it", pkg, dep)
				}
			case !slices.ContainsFunc(allowed, func(a string) bool { return dep == a || strings.HasSuffix(dep, "/"+a) }):
				t.Errorf("%s imports %s; its row allows %v", pkg, dep, allowed)
			}
		}
	}
}

// leaf: the packages docs/development.md names as importing nothing of
// tickd's.
func leaf(pkg string) bool {
	return slices.Contains([]string{"internal/codec", "internal/earlysignal", "internal/gcpolicy", "internal/logs", "internal/retry", "schedule", "tickdtype"}, pkg)
}

// drawnLayers reads the Layout drawing: each package's allowed imports,
// and the packages top to bottom.
func drawnLayers(t *testing.T) (map[string][]string, []string) {
	f, err := os.Open(filepath.Join("..", "..", "..", "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string][]string{}
	var order []string
	inLayout, inDrawing := false, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inLayout = line == "## Layout"
		case inLayout && strings.HasPrefix(line, "```"):
			inDrawing = !inDrawing
		case inDrawing:
			m := layerLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			allowed := []string{} // no arrow: nothing of tickd's
			if m[2] != "" {
				for a := range strings.SplitSeq(m[2], ",") {
					allowed = append(allowed, strings.TrimSpace(a))
				}
			}
			rows[m[1]] = allowed
			order = append(order, m[1])
		}
	}
	if len(rows) < 5 {
		t.Fatalf("found %d rows in docs/development.md's Layout drawing", len(rows))
	}
	return rows, order
}
