// Package packaging holds the tests of what packaging/build writes: the
// .deb and .rpm (built, linted, installed and purged with dpkg), and the
// container image (loaded and run by podman). The build runs once, for
// both architectures, into a directory of the test binary's own.
package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tier"
)

// A build of packaging/build into a directory of the test binary's own,
// made once.
type distBuild struct {
	once         sync.Once
	dir, version string
	err          error
}

var built, upgrade distBuild

// make runs packaging/build once into a new directory, with env added.
func (d *distBuild) make(env ...string) {
	d.once.Do(func() {
		if d.dir, d.err = os.MkdirTemp("", "tickd-dist"); d.err != nil {
			return
		}
		cmd := exec.Command("bash", "packaging/build")
		cmd.Dir = ".."
		cmd.Env = append(append(os.Environ(), "DIST="+d.dir), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			d.err = fmt.Errorf("%s bash packaging/build: %v\n%s", strings.Join(env, " "), err, out)
		}
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{built.dir, upgrade.dir, kubecheck.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// dist runs packaging/build once and returns its directory and the version
// it gave the packages.
func dist(t *testing.T) (dir, version string) {
	t.Helper()
	tier.Full(t, "a build of the packages and podman, rpm, lintian")
	built.make("ARCHES=amd64 arm64")
	if built.err == nil && built.version == "" {
		debs, _ := filepath.Glob(filepath.Join(built.dir, "tickd_*_amd64.deb"))
		if len(debs) != 1 {
			built.err = fmt.Errorf("packaging/build wrote %v, want one tickd_VERSION_amd64.deb", debs)
		} else {
			built.version = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(debs[0]), "tickd_"), "_amd64.deb")
		}
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir, built.version
}

// nextDist builds the amd64 packages once more, as a later version (the
// version of dist with ".1" after it), for the upgrade tests.
func nextDist(t *testing.T) (dir, version string) {
	t.Helper()
	_, v := dist(t)
	upgrade.version = v + ".1"
	upgrade.make("ARCHES=amd64", "VERSION="+upgrade.version)
	if upgrade.err != nil {
		t.Fatal(upgrade.err)
	}
	return upgrade.dir, upgrade.version
}

// TestBuildWritesDist: one command writes the packages of both
// architectures and the image archive, named as docs/operations.md says.
func TestBuildWritesDist(t *testing.T) {
	dir, v := dist(t)
	for _, name := range []string{"tickd_" + v + "_amd64.deb", "tickd_" + v + "_arm64.deb",
		"tickd-" + v + ".x86_64.rpm", "tickd-" + v + ".aarch64.rpm", "tickd-image.tar"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		t.Logf("%-44s %5.1f MB", name, float64(fi.Size())/1e6)
	}
	if !versionRE.MatchString(v) {
		t.Errorf("version %q: want X.Y.Z at a tag, X.Y.Z+gitN.SHA after it or after CHANGELOG.md's latest release heading, 0.0.0+gitN.SHA before any (.dirty with changes)", v)
	}
}

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(\+git[0-9]+\.[0-9a-f]+)?(\.dirty)?$`)

// tool finds a program the test needs (Debian's package pkg), or fails the
// test with the line that gets it.
func tool(t *testing.T, bin, pkg string) string {
	return redistest.Tool(t, bin, fmt.Sprintf("%s not found on PATH: install it (Debian/Ubuntu: sudo apt-get install -y %s)", bin, pkg))
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
