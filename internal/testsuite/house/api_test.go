package house

import (
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// apiFile is the snapshot of tickd's public API, one line per exported
// name (as Go's own api/ files are): TestAPISnapshot holds the code to it.
const apiFile = "../../../api/tickd.txt"

// publicPackages are the packages a program may import: every package of
// the module but commands, internal ones and the ones that hold tests only.
func publicPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Name}} {{len .GoFiles}}`, "../../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		path := f[0]
		if f[1] == "main" || f[2] == "0" || strings.Contains(path+"/", "/internal/") {
			continue
		}
		pkgs = append(pkgs, path)
	}
	return pkgs
}

// shortName is a package's path in the module: "tickd" for its root.
func shortName(path string) string {
	if path == strings.TrimSuffix(module, "/") {
		return "tickd"
	}
	return strings.TrimPrefix(path, module)
}

// apiLines are the exported API of the packages, one sorted line per
// name: "pkg PATH, KIND NAME TYPE", a struct's exported fields and an
// interface's methods on lines of their own.
func apiLines(t *testing.T, pkgs []string) []string {
	t.Helper()
	imp := importer.ForCompiler(token.NewFileSet(), "gc", exportData(t, pkgs))
	var lines []string
	for _, path := range pkgs {
		p, err := imp.Import(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		short := shortName(path)
		for _, l := range objectLines(p) {
			lines = append(lines, "pkg "+short+", "+l)
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// exportData finds the compiler's export data of pkgs and their
// dependencies (go list -export), for the gc importer.
func exportData(t *testing.T, pkgs []string) importer.Lookup {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok {
			files[path] = file
		}
	}
	return func(path string) (io.ReadCloser, error) {
		if files[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(files[path])
	}
}

// objectLines are the lines of p's exported names.
func objectLines(p *types.Package) []string {
	q := func(other *types.Package) string { // a package by its name, as its users write it
		if other == p {
			return ""
		}
		return other.Name()
	}
	ts := func(t types.Type) string { return types.TypeString(t, q) }
	var lines []string
	for _, name := range p.Scope().Names() {
		switch o := p.Scope().Lookup(name).(type) {
		case *types.Const:
			if o.Exported() {
				lines = append(lines, fmt.Sprintf("const %s %s = %s", name, ts(o.Type()), o.Val().ExactString()))
			}
		case *types.Var:
			if o.Exported() {
				lines = append(lines, fmt.Sprintf("var %s %s", name, ts(o.Type())))
			}
		case *types.Func:
			if o.Exported() {
				lines = append(lines, "func "+name+signature(o.Type(), ts))
			}
		case *types.TypeName:
			lines = append(lines, typeLines(o, ts)...)
		}
	}
	return lines
}

// typeLines are the lines of a type name: the type, its exported fields or
// methods, and the exported methods of it and its pointer.
func typeLines(o *types.TypeName, ts func(types.Type) string) []string {
	var lines []string
	name := o.Name()
	if o.IsAlias() {
		if o.Exported() {
			lines = append(lines, fmt.Sprintf("type %s = %s", name, ts(types.Unalias(o.Type()))))
		}
		return lines
	}
	named, ok := o.Type().(*types.Named)
	if !ok {
		return lines
	}
	if o.Exported() {
		switch u := named.Underlying().(type) {
		case *types.Struct:
			lines = append(lines, "type "+name+" struct")
			for i := range u.NumFields() {
				if f := u.Field(i); f.Exported() {
					lines = append(lines, fmt.Sprintf("type %s struct, %s %s", name, f.Name(), ts(f.Type())))
				}
			}
		case *types.Interface:
			lines = append(lines, "type "+name+" interface")
			// An embedded interface is a line (another module's, such as
			// go-redis's client, changes with its version), not its methods.
			for i := range u.NumEmbeddeds() {
				lines = append(lines, fmt.Sprintf("type %s interface, embeds %s", name, ts(u.EmbeddedType(i))))
			}
			for i := range u.NumExplicitMethods() {
				m := u.ExplicitMethod(i)
				if m.Exported() {
					lines = append(lines, fmt.Sprintf("type %s interface, %s%s", name, m.Name(), signature(m.Type(), ts)))
				} else {
					lines = append(lines, fmt.Sprintf("type %s interface, unexported methods", name))
				}
			}
		default:
			lines = append(lines, fmt.Sprintf("type %s %s", name, ts(u)))
		}
	}
	// Methods: of an exported type, or reached through an exported alias
	// or field (not followed here: those are rare and show in their type).
	if !o.Exported() {
		return lines
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		recv := name
		if _, ptr := m.Type().(*types.Signature).Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		lines = append(lines, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), signature(m.Type(), ts)))
	}
	return lines
}

// signature is a function's type without its parameters' names (renaming
// one breaks no caller), and with its type parameters.
func signature(t types.Type, ts func(types.Type) string) string {
	sig := t.(*types.Signature)
	unnamed := func(tup *types.Tuple) *types.Tuple {
		vars := make([]*types.Var, tup.Len())
		for i := range vars {
			vars[i] = types.NewParam(token.NoPos, nil, "", tup.At(i).Type())
		}
		return types.NewTuple(vars...)
	}
	var tparams string
	if tp := sig.TypeParams(); tp != nil && tp.Len() > 0 {
		var ps []string
		for i := range tp.Len() {
			ps = append(ps, tp.At(i).Obj().Name()+" "+ts(tp.At(i).Constraint()))
		}
		tparams = "[" + strings.Join(ps, ", ") + "]"
	}
	bare := types.NewSignatureType(nil, nil, nil, unnamed(sig.Params()), unnamed(sig.Results()), sig.Variadic())
	return tparams + strings.TrimPrefix(ts(bare), "func")
}

// TestAPISnapshot: the public packages' exported API is api/tickd.txt's.
// A change to it changes the snapshot in the same commit (with
// TICKD_API_WRITE=1 this test writes it), and a change that removes or
// alters a line is named in CHANGELOG.md in that commit too
// (TestAPIBreaksInTheChangelog).
func TestAPISnapshot(t *testing.T) {
	got := strings.Join(apiLines(t, publicPackages(t)), "\n") + "\n"
	if os.Getenv("TICKD_API_WRITE") != "" {
		if err := os.WriteFile(apiFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatalf("%v: write it with TICKD_API_WRITE=1 go test -run TestAPISnapshot ./internal/testsuite/house", err)
	}
	want := strings.Split(strings.TrimSpace(string(data)), "\n")
	have := strings.Split(strings.TrimSpace(got), "\n")
	gone, added := difference(want, have), difference(have, want)
	if len(gone) > 0 || len(added) > 0 {
		t.Errorf("the public API is not api/tickd.txt's: update it (TICKD_API_WRITE=1 go test -run TestAPISnapshot ./internal/testsuite/house)"+
			" and, for a line gone or changed, name it in CHANGELOG.md in the same commit.\ngone:\n\t%s\nnew:\n\t%s",
			strings.Join(gone, "\n\t"), strings.Join(added, "\n\t"))
	}
}

// difference is the lines of a not in b.
func difference(a, b []string) []string {
	in := map[string]bool{}
	for _, l := range b {
		in[l] = true
	}
	var d []string
	for _, l := range a {
		if !in[l] {
			d = append(d, l)
		}
	}
	return d
}

// apiName is the name a snapshot line is about: a function's, a method's,
// a field's or an interface method's, else the type's, const's or var's.
var apiName = regexp.MustCompile(`^pkg [^,]+, (?:(?:func|const|var) (\w+)|method \([^)]*\) (\w+)|type \w+ (?:struct|interface), (?:embeds )?(?:\*?[\w.]+\.)?(\w+)|type (\w+))`)

// TestAPIBreaksInTheChangelog: every commit that removed or changed a line
// of api/tickd.txt, or added a method to an interface a program may
// implement, names what it broke in CHANGELOG.md, in lines it added.
func TestAPIBreaksInTheChangelog(t *testing.T) {
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", "../../.."}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v (this test reads the repository's history: run it in a git clone)", strings.Join(args, " "), err)
		}
		return string(out)
	}
	commits := strings.Fields(git("log", "--format=%H", "--", "api/tickd.txt"))
	if len(commits) == 0 {
		t.Fatal("no commit holds api/tickd.txt")
	}
	for _, c := range commits {
		if exec.Command("git", "-C", "../../..", "cat-file", "-e", c+"^:api/tickd.txt").Run() != nil {
			continue // the snapshot's first commit, or a shallow clone's edge
		}
		broke := breaks(git("show", c+"^:api/tickd.txt"), git("diff", "-U0", c+"^", c, "--", "api/tickd.txt"))
		var added []string
		for _, l := range strings.Split(git("diff", "-U0", c+"^", c, "--", "CHANGELOG.md"), "\n") {
			if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
				added = append(added, l)
			}
		}
		changelog := strings.Join(added, "\n")
		for _, l := range broke {
			name := l
			if m := apiName.FindStringSubmatch(l); m != nil {
				name = strings.Join(m[1:], "")
			}
			if !strings.Contains(changelog, name) {
				t.Errorf("commit %.10s changed the API without naming %q in CHANGELOG.md: %s", c, name, l)
			}
		}
	}
}

// breaks are the lines of a snapshot's diff that break a program: a line
// removed or changed, or a method added to an interface the snapshot
// before (before) had.
func breaks(before, diff string) []string {
	interfaces := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		if i := strings.Index(l, " interface"); i > 0 && !strings.Contains(l, "interface,") {
			interfaces[l[:i]] = true
		}
	}
	var broke []string
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "---"), strings.HasPrefix(l, "+++"):
		case strings.HasPrefix(l, "-"):
			broke = append(broke, l[1:])
		case strings.HasPrefix(l, "+") && strings.Contains(l, " interface, ") && !strings.Contains(l, "unexported methods"):
			if interfaces[l[1:strings.Index(l, " interface, ")]] {
				broke = append(broke, l[1:])
			}
		}
	}
	return broke
}

// unstableInStable finds, in a line of the API, a name of lease/driver (not
// yet stable) or an alias of an internal package's type.
var unstableInStable = regexp.MustCompile(`\bdriver\.|= (report|app|scheduler|console|history|registry|ops|telemetry)\.`)

// stablePackages are docs/releasing.md's stable Go packages.
var stablePackages = []string{"tickd", "tickdtype", "tasks", "tasks/taskstest", "config", "schedule", "lease"}

// unstableDebt is the stable API's lines that still name lease/driver or
// alias an internal type: the list only shrinks. Each must still be in the
// API (strike it when its line goes), and no other line may do so. One
// stays by design: lease.New is where a driver of a program's own is
// handed in (as river's NewClient takes its driver), so it names the
// contract and changes with it; NewRedis and NewMemory name none of it.
var unstableDebt = []string{
	`pkg lease, func New(driver.Driver, Options) *Store`,
}

// TestStableAPINamesNothingUnstable: no line of a stable package's API
// names lease/driver, which docs/releasing.md calls not yet stable, or
// aliases an internal package's type (go doc shows none of its fields,
// and the snapshot misses a field added to it), but the known debt.
func TestStableAPINamesNothingUnstable(t *testing.T) {
	data, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for _, l := range lines {
		pkg, _, _ := strings.Cut(strings.TrimPrefix(l, "pkg "), ",")
		if slices.Contains(stablePackages, pkg) && unstableInStable.MatchString(l) && !slices.Contains(unstableDebt, l) {
			t.Errorf("a stable package's API names an unstable type: %s", l)
		}
	}
	for _, d := range unstableDebt {
		if !slices.Contains(lines, d) {
			t.Errorf("unstableDebt lists a line the API no longer has: strike it: %s", d)
		}
	}
}
