package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebInstallUpgradePurge installs the .deb on this machine (as root, as
// CI runs), checks what it installed, upgrades it to a later version over
// an edited config (kept), removes it and purges it.
func TestDebInstallUpgradePurge(t *testing.T) {
	dpkg := tool(t, "dpkg", "dpkg")
	analyze := tool(t, "systemd-analyze", "systemd")
	tool(t, "systemd-sysusers", "systemd")
	if os.Geteuid() != 0 {
		t.Fatal("installing the .deb needs root: run the tests as root (CI does), e.g. sudo go test ./packaging")
	}
	dir, v := dist(t)
	deb := filepath.Join(dir, "tickd_"+v+"_amd64.deb")
	exec.Command(dpkg, "--purge", "tickd").Run() //nolint:errcheck // a leftover of an earlier run
	_, hadUser := lookupUser("tickd")
	t.Cleanup(func() {
		exec.Command(dpkg, "--purge", "tickd").Run() //nolint:errcheck
		os.RemoveAll("/etc/tickd")
		if !hadUser {
			exec.Command("userdel", "tickd").Run() //nolint:errcheck
		}
	})
	dpkgRun(t, "-i", deb)
	checkInstalled(t, v)
	checkInstalledUnits(t, analyze)

	// An edited config survives an upgrade; an operator's own file too.
	edited := appendLine(t, "/etc/tickd/config.toml", "# edited by the operator")
	if err := os.WriteFile("/etc/tickd/other.toml", []byte("# the operator's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nextDir, next := nextDist(t)
	dpkgRun(t, "-i", filepath.Join(nextDir, "tickd_"+next+"_amd64.deb"))
	if out := run(t, "/usr/bin/tickd", "version"); !strings.HasPrefix(out, "tickd "+next+" ") {
		t.Errorf("after the upgrade, tickd version: %q, want tickd %s", out, next)
	}
	if got, _ := os.ReadFile("/etc/tickd/config.toml"); string(got) != edited {
		t.Error("upgrading replaced the edited /etc/tickd/config.toml")
	}
	checkRemoveAndPurge(t)
}

// checkInstalled checks the binary, the account, the conffile, and that
// nothing started.
func checkInstalled(t *testing.T, v string) {
	if out := run(t, "/usr/bin/tickd", "version"); !strings.HasPrefix(out, "tickd "+v+" ") {
		t.Errorf("tickd version: %q, want tickd %s", out, v)
	}
	if shell, ok := lookupUser("tickd"); !ok || shell != "/usr/sbin/nologin" {
		t.Errorf("the tickd account: found %v, shell %q; want a system account with no login", ok, shell)
	}
	if out := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "tickd"); !strings.Contains(out, "/etc/tickd/config.toml") {
		t.Errorf("conffiles: %q, want /etc/tickd/config.toml", out)
	}
	if pids := running("/usr/bin/tickd"); len(pids) > 0 {
		t.Errorf("tickd running after the install: %v", pids)
	}
	// The config may come to hold a Redis password: root and the
	// service's group only.
	if out := strings.TrimSpace(run(t, "stat", "-c", "%U:%G %a", "/etc/tickd/config.toml")); out != "root:tickd 640" {
		t.Errorf("/etc/tickd/config.toml: %s, want root:tickd 640", out)
	}
	// The example config is one the service can run.
	run(t, "/usr/bin/tickd", "check", "-config", "/etc/tickd/config.toml")
}

// checkInstalledUnits checks the installed units as systemd reads them
// (the template as an instance), with the packaged paths and account.
func checkInstalledUnits(t *testing.T, analyze string) {
	units := []string{"/usr/lib/systemd/system/tickd.service", "/usr/lib/systemd/system/tickd.target"}
	inst := filepath.Join(t.TempDir(), "tickd@test.service")
	data, err := os.ReadFile("/usr/lib/systemd/system/tickd@.service")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(analyze, append([]string{"verify"}, append(units, inst)...)...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// The instance's config is the operator's to write.
		if line != "" && !strings.Contains(line, "/etc/tickd/test.toml") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	for _, unit := range append(units, "/usr/lib/systemd/system/tickd@.service") {
		data, _ := os.ReadFile(unit)
		if strings.Contains(string(data), "/usr/local/bin") {
			t.Errorf("%s still names /usr/local/bin", unit)
		}
	}
	service, _ := os.ReadFile(units[0])
	for _, d := range []string{"ExecStart=/usr/bin/tickd run -config /etc/tickd/config.toml", "User=tickd", "DynamicUser=yes"} {
		if !strings.Contains(string(service), "\n"+d+"\n") {
			t.Errorf("tickd.service lacks %s", d)
		}
	}
}

// checkRemoveAndPurge removes the package (its config stays), then purges
// it: none of its files stay, but an operator's own file in /etc/tickd and
// the account do.
func checkRemoveAndPurge(t *testing.T) {
	files := strings.Fields(run(t, "dpkg-query", "-L", "tickd"))
	dpkgRun(t, "-r", "tickd")
	for _, f := range []string{"/usr/bin/tickd", "/usr/lib/systemd/system/tickd.service"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s left after dpkg -r", f)
		}
	}
	if _, err := os.Stat("/etc/tickd/config.toml"); err != nil {
		t.Errorf("dpkg -r removed the config: %v", err)
	}
	dpkgRun(t, "-P", "tickd")
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && !fi.IsDir() {
			t.Errorf("%s left after dpkg -P", f)
		}
	}
	if _, err := os.Stat("/etc/tickd/other.toml"); err != nil {
		t.Errorf("dpkg -P removed a file the package did not install: %v", err)
	}
	if _, ok := lookupUser("tickd"); !ok {
		t.Error("dpkg -P removed the tickd account (files it owns may remain: it stays)")
	}
}

// dpkgRun runs dpkg with args, non-interactively.
func dpkgRun(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("dpkg", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// lookupUser returns name's login shell, and whether the account exists.
func lookupUser(name string) (string, bool) {
	out, err := exec.Command("getent", "passwd", name).Output()
	if err != nil {
		return "", false
	}
	fields := strings.Split(strings.TrimSpace(string(out)), ":")
	return fields[len(fields)-1], true
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

// running lists the pids of processes running the program at exe.
func running(exe string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
