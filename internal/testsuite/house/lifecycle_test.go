package house

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// lifecycleOwned are the types whose Start, Stop and Reload only
// internal/app calls: the scheduler, the lease store and the tracer.
var lifecycleOwned = []string{
	module + "internal/scheduler.Scheduler",
	module + "internal/lease.Store",
	module + "internal/telemetry.Tracer",
}

// TestOneLifecycle: the binary (cmd/tickd, its shipped files) never
// starts, reloads or stops the scheduler, the lease store or the tracer
// itself: it opens an app.App, adds its own parts (the watchdog, the
// metrics listener, the console's server, the watches) and calls the
// App's Start, Reload and Stop, the lifecycle an embedding program runs
// through tickd.Open. The check type-checks the binary's files and fails
// on every call of those methods on those types, wherever the value came
// from (a field of the App, a variable, a function's result).
func TestOneLifecycle(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "cmd", "tickd")
	out, err := exec.Command("go", "list", "-f", `{{join .GoFiles " "}}`, "../../../cmd/tickd").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range strings.Fields(string(out)) {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", exportData(t, []string{"../../../cmd/tickd"}))}
	if _, err := conf.Check(module+"cmd/tickd", fset, files, info); err != nil {
		t.Fatalf("type-check cmd/tickd: %v", err)
	}
	found := 0
	for sel, s := range info.Selections {
		if s.Kind() != types.MethodVal {
			continue
		}
		switch sel.Sel.Name {
		case "Start", "Stop", "Reload":
		default:
			continue
		}
		if name := ownedName(s.Recv()); name != "" {
			t.Errorf("%s: cmd/tickd calls %s.%s itself; start, reload and stop tickd through app.App", fset.Position(sel.Pos()), name, sel.Sel.Name)
			found++
		}
	}
	// Nor hands one to a function as an interface value (a "service" its
	// own code would start and stop).
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sig, ok := info.Types[call.Fun].Type.(*types.Signature)
			if !ok {
				return true
			}
			for i, arg := range call.Args {
				if i >= sig.Params().Len() {
					break
				}
				if _, isIface := sig.Params().At(i).Type().Underlying().(*types.Interface); !isIface {
					continue
				}
				if name := ownedName(info.Types[arg].Type); name != "" {
					t.Errorf("%s: cmd/tickd hands a %s on as an interface value to start or stop it; start, reload and stop tickd through app.App", fset.Position(arg.Pos()), name)
					found++
				}
			}
			return true
		})
	}
	if found > 0 {
		t.Logf("%d calls", found)
	}
}

// ownedName is the name of t when it is one of lifecycleOwned (or a pointer
// to one), else "".
func ownedName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := t.(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return ""
	}
	name := named.Obj().Pkg().Path() + "." + named.Obj().Name()
	for _, owned := range lifecycleOwned {
		if name == owned {
			return named.Obj().Name()
		}
	}
	return ""
}
