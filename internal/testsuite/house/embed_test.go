package house

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxEmbedderModules bounds what a program that imports tickd inherits:
// the modules of its `go list -m all`, its own included.
const maxEmbedderModules = 60

// TestWhatAnEmbedderInherits: a program whose one import is tickd's root
// package has at most maxEmbedderModules modules in its graph and links
// no gRPC. Before the binary became a module of its own (cmd/tickd: the
// OTLP exporter, systemd, chromedp and redislock for its tests), the
// program's graph held 72 modules after a tidy, 130 before.
//
// The program is tidied offline (GOPROXY=off): every module it needs is in
// the cache already, since building tickd's tests needed them.
func TestWhatAnEmbedderInherits(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/embedder\n\ngo 1.26.0\n\nrequire github.com/tickd/tickd v0.1.0\n\nreplace github.com/tickd/tickd => "+root+"\n")
	write("main.go", "package main\n\nimport _ \"github.com/tickd/tickd\"\n\nfunc main() {}\n")
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sums))
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod", "GOSUMDB=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	mods := strings.Fields(goCmd("list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) > maxEmbedderModules {
		t.Errorf("a program importing tickd has %d modules, want at most %d:\n%s", len(mods), maxEmbedderModules, strings.Join(mods, "\n"))
	}
	for _, pkg := range strings.Fields(goCmd("list", "-deps", ".")) {
		if strings.HasPrefix(pkg, "google.golang.org/grpc") {
			t.Fatalf("a program importing tickd links %s", pkg)
		}
	}
	t.Logf("%d modules", len(mods))
}
