package packaging

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// throwaway is a throwaway root for installing packages in: a podman
// container whose root filesystem is an overlay of this machine's own
// (--rootfs /:O: the same dpkg, systemd and accounts, every write going to
// a layer podman discards), with no network. The directories the test
// gives are mounted read-only at their own paths.
type throwaway struct {
	t    *testing.T
	name string
}

// newThrowaway starts a throwaway root, removed when the test ends.
func newThrowaway(t *testing.T, dirs ...string) *throwaway {
	t.Helper()
	tool(t, "podman", "podman")
	tool(t, "runc", "runc")
	args := []string{"run", "-d", "--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	for _, d := range dirs {
		args = append(args, "-v", d+":"+d+":ro")
	}
	args = append(args, "--rootfs", "/:O", "sleep", "infinity")
	out, err := exec.Command("podman", append(slices.Clone(podmanArgs), args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman run --rootfs /:O (a throwaway copy of this machine's root; podman needs root or a rootless setup with overlay): %v\n%s", err, out)
	}
	r := &throwaway{t: t, name: strings.TrimSpace(string(out))}
	t.Cleanup(func() {
		exec.Command("podman", append(slices.Clone(podmanArgs), "rm", "-f", "-t", "0", r.name)...).Run()
	}) //nolint:errcheck
	return r
}

// run runs a command in the root and returns its output, trimmed.
func (r *throwaway) run(args ...string) (string, error) {
	cmd := exec.Command("podman", append(slices.Clone(podmanArgs), append([]string{"exec", "-e", "DEBIAN_FRONTEND=noninteractive", r.name}, args...)...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// must is run, failing the test if the command fails.
func (r *throwaway) must(args ...string) string {
	r.t.Helper()
	out, err := r.run(args...)
	if err != nil {
		r.t.Fatalf("in the throwaway root, %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// dpkg runs dpkg with args, non-interactively.
func (r *throwaway) dpkg(args ...string) {
	r.t.Helper()
	r.must(append([]string{"dpkg"}, args...)...)
}

// read returns a file's content (with its last newline).
func (r *throwaway) read(path string) string {
	r.t.Helper()
	out, err := exec.Command("podman", append(slices.Clone(podmanArgs), "exec", r.name, "cat", path)...).Output()
	if err != nil {
		r.t.Fatalf("in the throwaway root, cat %s: %v", path, err)
	}
	return string(out)
}

// write writes data to the file at path.
func (r *throwaway) write(path, data string) {
	r.t.Helper()
	cmd := exec.Command("podman", append(slices.Clone(podmanArgs), "exec", "-i", r.name, "sh", "-c", `cat >"$1"`, "sh", path)...)
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("in the throwaway root, writing %s: %v\n%s", path, err, out)
	}
}

func (r *throwaway) exists(path string) bool { _, err := r.run("test", "-e", path); return err == nil }
func (r *throwaway) isFile(path string) bool { _, err := r.run("test", "-f", path); return err == nil }

// lookupUser returns name's login shell, and whether the account exists.
func (r *throwaway) lookupUser(name string) (string, bool) {
	out, err := r.run("getent", "passwd", name)
	if err != nil {
		return "", false
	}
	fields := strings.Split(out, ":")
	return fields[len(fields)-1], true
}

// running lists the pids of the root's processes running the program at
// exe.
func (r *throwaway) running(exe string) []string {
	out, _ := r.run("sh", "-c", fmt.Sprintf(`for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = %q ] && echo ${p#/proc/}; done; true`, exe))
	return strings.Fields(out)
}
