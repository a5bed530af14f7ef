package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tickd/tickd/internal/testkit/expect"
	"github.com/tickd/tickd/internal/testkit/tickdtest"
)

// TestUsageMistakes: every command-line mistake says what was wrong and
// shows the command's usage, exit 2 (they used to exit 2 in silence); with
// -json, the error is also one JSON object on stdout.
func TestUsageMistakes(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "t.toml")
	tickdtest.WriteFile(t, cfg, "[[tasks]]\nname = \"sync-users\"\nevery = \"1m\"\ncommand = [\"true\"]\n")
	cases := []struct {
		args      []string
		msg, uses string
	}{
		{[]string{"trigger", "-config", cfg}, "tickd trigger: missing TASK", "Usage: tickd trigger [flags] TASK [ENTITY…]"},
		{[]string{"unlock", "-config", cfg, "sync-users"}, "tickd unlock: missing ENTITY", "Usage: tickd unlock [flags] TASK ENTITY"},
		{[]string{"unlock", "-config", cfg}, "tickd unlock: missing TASK and ENTITY", "Usage: tickd unlock"},
		{[]string{"check", cfg}, `tickd check: unexpected argument "` + cfg + `" (give the config as -config ` + cfg + `)`, "Usage: tickd check [flags]\n"},
		{[]string{"run", cfg}, `tickd run: unexpected argument "` + cfg + `"`, "Usage: tickd run [flags]\n"},
		{[]string{"lock", "-config", cfg, "KEY"}, "tickd lock: missing -- CMD", "Usage: tickd lock [flags] KEY -- CMD [ARGS…]"},
		{[]string{"lock", "-config", cfg, "KEY", "true"}, `tickd lock: unexpected argument "true" before --`, "Usage: tickd lock"},
		{[]string{"lock", "-config", cfg, "-ttl", "100ms", "KEY", "--", "true"}, "tickd lock: -ttl 100ms is too short to renew; use at least 1.5s", "Usage: tickd lock"},
		{[]string{"pause", "-config", cfg, "a", "b"}, `tickd pause: unexpected argument "b"`, "Usage: tickd pause [flags] TASK"},
		{[]string{"status", "-config", cfg, "-limit", "0"}, "tickd status: -limit 0: show at least 1 row", "Usage: tickd status"},
		{[]string{"status", "-config", cfg, "-outcome", "bogus"}, `tickd status: -outcome "bogus": use one of [done reschedule failed timeout lease_lost canceled unlocked replaced]`, "Usage: tickd status"},
		{[]string{"status", "-config", cfg, "-nosuch"}, "tickd status: flag provided but not defined: -nosuch", "Usage: tickd status"},
		{[]string{"status", "tickd.toml"}, `tickd status: unexpected argument "tickd.toml" (give the config as -config tickd.toml)`, "Usage: tickd status"},
		{[]string{"trigger", "tickd.toml", "sync-users"}, `tickd trigger: unexpected argument "tickd.toml" (give the config as -config tickd.toml)`, "Usage: tickd trigger"},
		{[]string{"pause", "tickd.toml"}, `tickd pause: unexpected argument "tickd.toml" (give the config as -config tickd.toml)`, "Usage: tickd pause"},
		{[]string{"-config", cfg, "status"}, "tickd: the command comes first: tickd status -config " + cfg, "Usage:\n  tickd [run]"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[:1], " ")+" "+c.msg, func(t *testing.T) {
			code, out, errs := cli(c.args...)
			expect.Equal(t, "exit status", code, 2)
			expect.True(t, "stderr says "+c.msg, strings.HasPrefix(errs, c.msg))
			expect.True(t, "stderr shows "+c.uses, strings.Contains(errs, c.uses))
			expect.Equal(t, "stdout", out, "")
			if t.Failed() {
				t.Logf("stderr:\n%s", errs)
			}
		})
	}
	code, out, _ := cli("trigger", "-config", cfg, "-json")
	expect.Equal(t, "trigger -json: exit status", code, 2)
	expect.Equal[any](t, "trigger -json: the error object", decodeJSON(t, out)["error"], "missing TASK")
}

// TestFlagsAnywhere: flags after the arguments are flags, never arguments
// (`trigger … sync-users -wait` used to trigger an entity named "-wait");
// "--" ends the flags, for ids that begin with '-'.
func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	c := newCmdline("trigger", "TASK [ENTITY…]")
	wait := c.fs.Bool("wait", false, "")
	pos, err := c.args([]string{"sync-users", "-config", "t.toml", "e1", "-wait", "e2", "--", "-weird", "--"}, 1, -1, "TASK")
	if err != nil {
		t.Fatal(err)
	}
	expect.True(t, "positional arguments in order, those after -- kept as given: "+strings.Join(pos, " "),
		slices.Equal(pos, []string{"sync-users", "e1", "e2", "-weird", "--"}))
	expect.Equal(t, "-config after an argument", *c.config, "t.toml")
	expect.Equal(t, "-wait after an argument", *wait, true)

	// A command whose config comes after its argument reads that config.
	code, _, errs := cli("status", "sync-users", "-config", "/nonexistent/t.toml")
	expect.Equal(t, "status with -config last: exit status", code, 1)
	expect.True(t, "status reads the -config given last: "+errs, strings.Contains(errs, "/nonexistent/t.toml"))
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"-h", "--help", "help"} {
		code, out, _ := cli(h)
		expect.Equal(t, h+": exit status", code, 0)
		expect.True(t, h+" shows every command", strings.Contains(out, "tickd lock -config FILE") && strings.Contains(out, "tickd version"))
	}
	for _, cmd := range []string{"status", "trigger", "lock", "run"} {
		code, out, _ := cli(cmd, "-h")
		expect.Equal(t, cmd+" -h: exit status", code, 0)
		expect.True(t, cmd+" -h shows its usage and flags: "+out, strings.Contains(out, "Usage: tickd "+cmd) && strings.Contains(out, "-config"))
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, _ := cli(args...)
		expect.Equal(t, args[0]+": exit status", code, 0)
		expect.True(t, args[0]+" names the binary and Go: "+out, strings.HasPrefix(out, "tickd ") && strings.Contains(out, "go1."))
	}
	code, out, _ := cli("help", "status")
	expect.Equal(t, "help status: exit status", code, 0)
	expect.True(t, "help status shows status's usage: "+out, strings.Contains(out, "Usage: tickd status") && strings.Contains(out, "-limit"))
}
