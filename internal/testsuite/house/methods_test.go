package house

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tickd/tickd/lease/driver"
)

// maxMethods bounds the methods, exported or not, one type of shipped code
// declares: a type that does more is two types (issue 63: internal/lease's
// Store had 124).
const maxMethods = 40

// methodDebt is the types over maxMethods today, with their count: a count
// may only go down, and a type under the bound must be struck.
var methodDebt = map[string]int{
	"internal/scheduler.Scheduler": 43,
}

// TestTypesStaySmall: no type of shipped code declares more than
// maxMethods methods, but the drivers (a type with every method of
// driver.Driver implements the contract, whose size is its own) and the
// debt above, which only shrinks.
func TestTypesStaySmall(t *testing.T) {
	contract := map[string]bool{}
	for i := range reflect.TypeFor[driver.Driver]().NumMethod() {
		contract[reflect.TypeFor[driver.Driver]().Method(i).Name] = true
	}
	counts, err := methodsByType(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range slices.Sorted(maps.Keys(counts)) {
		ms := counts[key]
		implements := true
		for name := range contract {
			implements = implements && ms[name]
		}
		debt, owed := methodDebt[key]
		switch {
		case implements:
		case owed && len(ms) > debt:
			t.Errorf("%s declares %d methods, more than the %d it owed: the debt only shrinks", key, len(ms), debt)
		case owed && len(ms) <= maxMethods:
			t.Errorf("%s declares %d methods, within %d: strike it from methodDebt", key, len(ms), maxMethods)
		case !owed && len(ms) > maxMethods:
			t.Errorf("%s declares %d methods, over %d: split it by what it does", key, len(ms), maxMethods)
		}
	}
	for key := range methodDebt {
		if counts[key] == nil {
			t.Errorf("methodDebt lists %s, which declares no method: strike it", key)
		}
	}
}

// methodsByType are the methods each type of shipped code under root
// declares ("dir.Type" → names), tests and the tools module left out.
func methodsByType(root string) (map[string]map[string]bool, error) {
	counts := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || d.Name() == "tools" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			if name := receiverType(decl); name != "" {
				key := filepath.ToSlash(dir) + "." + name
				if counts[key] == nil {
					counts[key] = map[string]bool{}
				}
				counts[key][decl.(*ast.FuncDecl).Name.Name] = true
			}
		}
		return nil
	})
	return counts, err
}

// receiverType is the name of the type decl is a method of, or "".
func receiverType(decl ast.Decl) string {
	fn, ok := decl.(*ast.FuncDecl)
	if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
