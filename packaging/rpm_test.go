package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLintian: the .debs are lintian clean but for the overrides the
// package carries (a static binary; tickd@ wanted by tickd.target).
func TestLintian(t *testing.T) {
	lintian := tool(t, "lintian", "lintian")
	dir, v := dist(t)
	for _, arch := range []string{"amd64", "arm64"} {
		out := run(t, lintian, "--fail-on", "error,warning", filepath.Join(dir, "tickd_"+v+"_"+arch+".deb"))
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" && !strings.Contains(line, "root privileges") {
				t.Errorf("lintian (%s): %s", arch, line)
			}
		}
	}
}

// TestRPM reads the .rpm with rpm itself: its version, its files, the
// config kept on upgrade (%config(noreplace)), and the scripts that make
// the account and start nothing.
func TestRPM(t *testing.T) {
	rpm := tool(t, "rpm", "rpm")
	dir, v := dist(t)
	for arch, rpmArch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		file := filepath.Join(dir, "tickd-"+v+"."+rpmArch+".rpm")
		if got := run(t, rpm, "-qp", "--qf", "%{NAME} %{VERSION} %{ARCH} %{LICENSE}", file); got != "tickd "+v+" "+rpmArch+" Apache-2.0" {
			t.Errorf("%s: %q, want tickd %s %s Apache-2.0", arch, got, v, rpmArch)
		}
		files := run(t, rpm, "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags} %{FILEMODES:perms}\n]", file)
		for _, want := range []string{"/usr/bin/tickd  -rwxr-xr-x", "/etc/tickd/config.toml cn -rw-r-----",
			"/usr/lib/systemd/system/tickd.service  -rw-r--r--", "/usr/lib/sysusers.d/tickd.conf  -rw-r--r--",
			"/usr/share/licenses/tickd/copyright l -rw-r--r--"} {
			if !strings.Contains(files, want+"\n") {
				t.Errorf("%s: no %q in\n%s", arch, want, files)
			}
		}
		var code []string // the scripts' commands, without their comments
		for _, line := range strings.Split(run(t, rpm, "-qp", "--scripts", file), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") {
				code = append(code, line)
			}
		}
		scripts := strings.Join(code, "\n")
		if !strings.Contains(scripts, "systemd-sysusers /usr/lib/sysusers.d/tickd.conf") || !strings.Contains(scripts, "chgrp tickd /etc/tickd/config.toml") ||
			strings.Contains(scripts, "systemctl enable") || strings.Contains(scripts, "systemctl start") {
			t.Errorf("%s: the scripts make no account, or start tickd:\n%s", arch, scripts)
		}
	}
}

// TestRPMInstallUpgradeErase installs the .rpm into a root of its own (rpm
// --root; this machine is no rpm system, so without the scripts), upgrades
// it to a later version over an edited config, and erases it: the edited
// config is kept on upgrade (%config(noreplace): the package's own did not
// change) and saved as .rpmsave on erase.
func TestRPMInstallUpgradeErase(t *testing.T) {
	rpm := tool(t, "rpm", "rpm")
	if os.Geteuid() != 0 {
		t.Fatal("rpm --root needs root: run the tests as root (CI does), e.g. sudo go test ./packaging")
	}
	dir, v := dist(t)
	nextDir, next := nextDist(t)
	root := t.TempDir()
	do := func(args ...string) { run(t, rpm, append([]string{"--root", root}, args...)...) }
	do("--initdb")
	do("-i", "--nodeps", "--noscripts", filepath.Join(dir, "tickd-"+v+".x86_64.rpm"))
	config := filepath.Join(root, "etc", "tickd", "config.toml")
	edited := appendLine(t, config, "# edited by the operator")
	do("-U", "--nodeps", "--noscripts", filepath.Join(nextDir, "tickd-"+next+".x86_64.rpm"))
	if out := run(t, filepath.Join(root, "usr", "bin", "tickd"), "version"); !strings.HasPrefix(out, "tickd "+next+" ") {
		t.Errorf("after the upgrade, tickd version: %q, want tickd %s", out, next)
	}
	if got, _ := os.ReadFile(config); string(got) != edited {
		t.Error("upgrading replaced the edited /etc/tickd/config.toml")
	}
	do("-e", "--nodeps", "--noscripts", "tickd")
	if _, err := os.Stat(filepath.Join(root, "usr", "bin", "tickd")); err == nil {
		t.Error("/usr/bin/tickd left after rpm -e")
	}
	if got, _ := os.ReadFile(config + ".rpmsave"); string(got) != edited {
		t.Error("rpm -e did not keep the edited config as config.toml.rpmsave")
	}
}

// appendLine appends line to the file at path and returns its content.
func appendLine(t *testing.T, path, line string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, line+"\n"...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return string(data)
}
