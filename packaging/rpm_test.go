package packaging

import (
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
		if got := run(t, rpm, "-qp", "--qf", "%{NAME} %{VERSION} %{ARCH}", file); got != "tickd "+v+" "+rpmArch {
			t.Errorf("%s: %q, want tickd %s %s", arch, got, v, rpmArch)
		}
		files := run(t, rpm, "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags} %{FILEMODES:perms}\n]", file)
		for _, want := range []string{"/usr/bin/tickd  -rwxr-xr-x", "/etc/tickd/config.toml cn -rw-r--r--",
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
		if !strings.Contains(scripts, "systemd-sysusers /usr/lib/sysusers.d/tickd.conf") || strings.Contains(scripts, "systemctl enable") || strings.Contains(scripts, "systemctl start") {
			t.Errorf("%s: the scripts make no account, or start tickd:\n%s", arch, scripts)
		}
	}
}
