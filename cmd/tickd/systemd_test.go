package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/redistest"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestSystemdNotify runs tickd with NOTIFY_SOCKET pointing at a unix datagram
// socket, as systemd would, and reads the protocol messages.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		b := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(b)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b[:n])
		}
	}()
	cfg := filepath.Join(dir, "tickd.toml")
	tickdtest.WriteFile(t, cfg, "[[tasks]]\nname = \"a\"\nevery = \"1h\"\ncommand = [\"true\"]\n")
	p := tickdtest.Start(t, "notify", []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=200000"}, "-config", cfg)
	want := func(s string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains(m, s) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s from tickd", s)
			}
		}
	}
	want("READY=1")
	want("WATCHDOG=1")
	p.Signal(syscall.SIGHUP)
	want("RELOADING=1")
	want("READY=1")
	p.Signal(syscall.SIGTERM)
	want("STOPPING=1")
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestSystemdUnits checks the units with systemd-analyze where it exists,
// and the directives docs/operations.md promises everywhere.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	for _, unit := range []string{"tickd.service", "tickd@.service"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
			"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "TimeoutStopSec=50s",
			"TimeoutStartSec=30s"} {
			if !strings.Contains(string(data), "\n"+d) {
				t.Errorf("%s lacks %s", unit, d)
			}
		}
		// systemctl reload checks the file before the SIGHUP, so a bad one
		// fails the reload (ExecReload= lines run in order; one failing
		// stops the rest).
		var start string
		var reloads []string
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
				start = v
			}
			if v, ok := strings.CutPrefix(line, "ExecReload="); ok {
				reloads = append(reloads, v)
			}
		}
		check := strings.Replace(start, "tickd run -config", "tickd check -config", 1)
		if len(reloads) != 2 || reloads[0] != check || reloads[1] != "/bin/kill -HUP $MAINPID" {
			t.Errorf("%s: ExecReload= %q, want %q then the SIGHUP", unit, reloads, check)
		}
	}
	// systemd itself checks the units: the template as an instance, next to
	// the target it is wanted by.
	analyze := redistest.Tool(t, "systemd-analyze",
		"systemd-analyze not found on PATH: install it (Debian/Ubuntu: sudo apt-get install -y systemd)")
	dir := t.TempDir()
	var units []string
	for src, dst := range map[string]string{"tickd.service": "tickd.service", "tickd@.service": "tickd@test.service", "tickd.target": "tickd.target"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "systemd", src))
		if err != nil {
			t.Fatal(err)
		}
		tickdtest.WriteFile(t, filepath.Join(dir, dst), string(data))
		units = append(units, filepath.Join(dir, dst))
	}
	out, _ := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// A build machine has no /usr/local/bin/tickd; anything else is a
		// problem of the units.
		if line != "" && !strings.Contains(line, "/usr/local/bin/tickd is not executable") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	tmpl, _ := os.ReadFile(filepath.Join("..", "..", "systemd", "tickd@.service"))
	if !strings.Contains(string(tmpl), "\nWantedBy=tickd.target") {
		t.Error("tickd@.service is not wanted by tickd.target: starting the target would start nothing")
	}
}
