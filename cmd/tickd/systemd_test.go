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

	"github.com/tickd/tickd/internal/tickdtest"
)

// TestSystemdNotify runs tickd with NOTIFY_SOCKET pointing at a unix datagram
// socket, as systemd would, and reads the protocol messages.
func TestSystemdNotify(t *testing.T) {
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
// and the directives the README promises everywhere.
func TestSystemdUnits(t *testing.T) {
	for _, unit := range []string{"tickd.service", "tickd@.service"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
			"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "TimeoutStopSec=50s"} {
			if !strings.Contains(string(data), "\n"+d) {
				t.Errorf("%s lacks %s", unit, d)
			}
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze not installed: unit syntax not verified by systemd")
		return
	}
	out, err := exec.Command("systemd-analyze", "verify", filepath.Join("..", "..", "systemd", "tickd.service")).CombinedOutput()
	// verify complains about the missing binary on a build machine; only
	// syntax problems count.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Unknown key") || strings.Contains(line, "Failed to parse") || strings.Contains(line, "Invalid") {
			t.Errorf("systemd-analyze: %s", line)
		}
	}
	_ = err
}
