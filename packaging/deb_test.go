package packaging

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDebInstallUpgradePurge installs the .deb in a throwaway root (a
// copy of this machine's, see throwaway), checks what it installed,
// upgrades it to a later version over an edited config (kept), removes it
// and purges it. Nothing is installed on the machine that runs the test.
func TestDebInstallUpgradePurge(t *testing.T) {
	tool(t, "dpkg", "dpkg")
	tool(t, "systemd-analyze", "systemd")
	tool(t, "systemd-sysusers", "systemd")
	dir, v := dist(t)
	nextDir, next := nextDist(t)
	r := newThrowaway(t, dir, nextDir)
	if _, had := r.lookupUser("tickd"); had {
		// The machine once had the package (a purge keeps the account, as
		// postrm says): the throwaway's copy drops it, so that the test can
		// tell the package makes it. The machine's own is not touched.
		r.must("userdel", "tickd")
		r.run("groupdel", "tickd") //nolint:errcheck // userdel may have taken it
		if _, still := r.lookupUser("tickd"); still {
			t.Fatal("the throwaway root keeps a tickd account after userdel: the test cannot tell the package made it")
		}
	}
	r.dpkg("-i", filepath.Join(dir, "tickd_"+v+"_amd64.deb"))
	checkInstalled(t, r, v)
	checkInstalledUnits(t, r)

	// An edited config survives an upgrade; an operator's own file too.
	edited := r.read("/etc/tickd/config.toml") + "# edited by the operator\n"
	r.write("/etc/tickd/config.toml", edited)
	r.write("/etc/tickd/other.toml", "# the operator's\n")
	r.dpkg("-i", filepath.Join(nextDir, "tickd_"+next+"_amd64.deb"))
	if out := r.must("/usr/bin/tickd", "version"); !strings.HasPrefix(out, "tickd "+next+" ") {
		t.Errorf("after the upgrade, tickd version: %q, want tickd %s", out, next)
	}
	if r.read("/etc/tickd/config.toml") != edited {
		t.Error("upgrading replaced the edited /etc/tickd/config.toml")
	}
	checkRemoveAndPurge(t, r)
}

// checkInstalled checks the binary, the account, the conffile, and that
// nothing started.
func checkInstalled(t *testing.T, r *throwaway, v string) {
	if out := r.must("/usr/bin/tickd", "version"); !strings.HasPrefix(out, "tickd "+v+" ") {
		t.Errorf("tickd version: %q, want tickd %s", out, v)
	}
	if shell, ok := r.lookupUser("tickd"); !ok || shell != "/usr/sbin/nologin" {
		t.Errorf("the tickd account: found %v, shell %q; want a system account with no login", ok, shell)
	}
	if out := r.must("dpkg-query", "-W", "-f=${Conffiles}", "tickd"); !strings.Contains(out, "/etc/tickd/config.toml") {
		t.Errorf("conffiles: %q, want /etc/tickd/config.toml", out)
	}
	if pids := r.running("/usr/bin/tickd"); len(pids) > 0 {
		t.Errorf("tickd running after the install: %v", pids)
	}
	// The config may come to hold a Redis password: root and the
	// service's group only.
	if out := r.must("stat", "-c", "%U:%G %a", "/etc/tickd/config.toml"); out != "root:tickd 640" {
		t.Errorf("/etc/tickd/config.toml: %s, want root:tickd 640", out)
	}
	// The example config is one the service can run.
	r.must("/usr/bin/tickd", "check", "-config", "/etc/tickd/config.toml")
}

// checkInstalledUnits checks the installed units as systemd reads them
// (the template as an instance), with the packaged paths and account.
func checkInstalledUnits(t *testing.T, r *throwaway) {
	units := []string{"/usr/lib/systemd/system/tickd.service", "/usr/lib/systemd/system/tickd.target"}
	inst := "/tmp/tickd@test.service"
	r.write(inst, r.read("/usr/lib/systemd/system/tickd@.service"))
	out, _ := r.run(append([]string{"systemd-analyze", "verify"}, append(units, inst)...)...)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// The instance's config is the operator's to write.
		if line != "" && !strings.Contains(line, "/etc/tickd/test.toml") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	for _, unit := range append(units, "/usr/lib/systemd/system/tickd@.service") {
		if strings.Contains(r.read(unit), "/usr/local/bin") {
			t.Errorf("%s still names /usr/local/bin", unit)
		}
	}
	service := r.read(units[0])
	for _, d := range []string{"ExecStart=/usr/bin/tickd run -config /etc/tickd/config.toml", "User=tickd", "DynamicUser=yes"} {
		if !strings.Contains(service, "\n"+d+"\n") {
			t.Errorf("tickd.service lacks %s", d)
		}
	}
}

// checkRemoveAndPurge removes the package (its config stays), then purges
// it: none of its files stay, but an operator's own file in /etc/tickd and
// the account do.
func checkRemoveAndPurge(t *testing.T, r *throwaway) {
	files := strings.Fields(r.must("dpkg-query", "-L", "tickd"))
	r.dpkg("-r", "tickd")
	for _, f := range []string{"/usr/bin/tickd", "/usr/lib/systemd/system/tickd.service"} {
		if r.exists(f) {
			t.Errorf("%s left after dpkg -r", f)
		}
	}
	if !r.exists("/etc/tickd/config.toml") {
		t.Error("dpkg -r removed the config")
	}
	r.dpkg("-P", "tickd")
	for _, f := range files {
		if r.isFile(f) {
			t.Errorf("%s left after dpkg -P", f)
		}
	}
	if !r.exists("/etc/tickd/other.toml") {
		t.Error("dpkg -P removed a file the package did not install")
	}
	if _, ok := r.lookupUser("tickd"); !ok {
		t.Error("dpkg -P removed the tickd account (files it owns may remain: it stays)")
	}
}
