package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/tickd/tickd/internal/earlysignal"
)

const usage = `tickd — recurring singleton tasks under Redis leases

Usage:
  tickd [run] -config FILE          run the daemon (the default command)
  tickd check -config FILE [-redis] validate; print each task's next 5 ticks
  tickd status -config FILE [TASK]  held leases, last runs, pending requests (-json)
  tickd trigger -config FILE TASK [ENTITY…]   ask for a run now (-wait)
  tickd pause|resume -config FILE TASK        stop/start ticking on every replica
                                    (pause -reason "…" [-for 2h])
  tickd history -config FILE TASK   recent ticks, failures and operator actions
  tickd web -config FILE            the console alone (the [web] table)
  tickd unlock -config FILE TASK ENTITY       revoke a lease: its run stops, then the entity is free
  tickd forget -config FILE TASK    a task no replica runs is gone on purpose: stop flagging it
  tickd lock -config FILE [-ttl 1m] [-busy-exit N] KEY -- CMD ARGS…
                                    run CMD under a lease, or exit at once if held
  tickd migrate -config FILE        move an older tickd's keys to this key layout
  tickd backfill -config FILE TASK -from T1 -to T2   run a past range's ticks, each
                                    (entity, tick) at most once ever (-dry-run, -wait);
                                    without TASK, list the backfills; -cancel ID

  tickd version                     the version and build of this binary

Flags may come before or after the arguments; arguments that begin with
'-' go after "--". Run "tickd help COMMAND" (or "tickd COMMAND -h") for a
command's flags; "tickd --version" is "tickd version".
`

// commands are the subcommands run knows.
var commands = []string{"run", "check", "status", "trigger", "pause", "resume", "unlock", "forget", "lock", "migrate", "history", "backfill", "web", "version", "help"}

// run dispatches a subcommand and turns its error into an exit status: a
// command-line mistake prints what was wrong and the command's usage, exit 2.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, args, explicit, err := command(args)
	if err != nil {
		fmt.Fprintf(stderr, "tickd: %v\n\n%s", err, usage)
		return 2
	}
	if cmd == "run" && len(args) == 1 && isHelp(args[0]) && !explicit { // tickd -h: the overview, not run's flags
		cmd = "help"
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, version())
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	if cmd != "run" && cmd != "lock" && cmd != "web" {
		earlysignal.Default() // the signals that stop a command stop it as they would without tickd
	}
	run, ok := subcommands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "tickd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return exitStatus(run(ctx, args, stdout, stderr), cmd, args, stdout, stderr)
}

// subcommands run a command with its arguments.
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"run": func(ctx context.Context, args []string, _, stderr io.Writer) error {
		return runDaemon(ctx, args, stderr)
	},
	"check": runCheck,
	"status": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runStatus(ctx, args, stdout)
	},
	"trigger": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runTrigger(ctx, args, stdout)
	},
	"pause": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runPause(ctx, args, stdout, true)
	},
	"resume": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runPause(ctx, args, stdout, false)
	},
	"unlock": runUnlock,
	"lock":   func(ctx context.Context, args []string, _, stderr io.Writer) error { return runLock(ctx, args, stderr) },
	"migrate": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runMigrate(ctx, args, stdout)
	},
	"forget": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runForget(ctx, args, stdout)
	},
	"history": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runHistory(ctx, args, stdout)
	},
	"web": func(ctx context.Context, args []string, _, stderr io.Writer) error { return runWeb(ctx, args, stderr) },
	"backfill": func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		return runBackfill(ctx, args, stdout)
	},
}

// command splits the command line into the command and its arguments;
// explicit says whether the command was named (tickd -config FILE runs the
// daemon). "tickd help CMD" is "tickd CMD -h", "tickd --version" is "tickd
// version"; a command named after a flag is a mistake.
func command(args []string) (cmd string, rest []string, explicit bool, err error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest, explicit = args[0], args[1:], true
	} else {
		cmd, rest = "run", args
		if len(rest) == 1 && (rest[0] == "-version" || rest[0] == "--version") {
			return "version", nil, false, nil
		}
		// tickd -config t.toml status: the command was taken for an argument.
		if i := slices.IndexFunc(rest, func(a string) bool { return slices.Contains(commands, a) }); i > 0 && rest[i] != "run" {
			return "", nil, false, fmt.Errorf("the command comes first: tickd %s %s", rest[i],
				strings.Join(slices.Delete(slices.Clone(rest), i, i+1), " "))
		}
	}
	if cmd == "help" && len(rest) == 1 && slices.Contains(commands, rest[0]) { // tickd help status
		return rest[0], []string{"-h"}, true, nil
	}
	return cmd, rest, explicit, nil
}

// exitStatus is the one place a command's error becomes an exit status,
// and is said: 0 for none; exitError's own; 2 for a command-line mistake,
// with the command's usage; 1 otherwise, and with -json the error as a
// document unless the command printed its own.
func exitStatus(err error, cmd string, args []string, stdout, stderr io.Writer) int {
	var ee exitError
	var ue *usageError
	var help helpRequest
	var pe printedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &pe): // its -json document is out: the message goes to stderr only
		fmt.Fprintf(stderr, "tickd %s: %v\n", cmd, pe.err)
		return 1
	case errors.As(err, &help):
		help.c.printUsage(stdout)
		return 0
	}
	code := 1
	if errors.As(err, &ue) {
		code = 2
	}
	if jsonCommands[cmd] && wantsJSON(args) { // the -json contract: errors too, once, on stdout
		printJSON(stdout, map[string]string{"error": err.Error()}) //nolint:errcheck // stdout is gone
		return code
	}
	if ue != nil {
		fmt.Fprintf(stderr, "tickd %s: %s\n\n", cmd, ue.msg)
		ue.c.printUsage(stderr)
	} else {
		fmt.Fprintf(stderr, "tickd %s: %v\n", cmd, err)
	}
	return code
}

// jsonCommands are the commands that take -json.
var jsonCommands = map[string]bool{"check": true, "status": true, "trigger": true, "pause": true, "resume": true,
	"unlock": true, "forget": true, "migrate": true, "history": true, "backfill": true}

// exitError is a command's exit status, said already (or by its silence):
// run exits with it and prints nothing more. tickd lock passes CMD's status
// through; trigger -wait exits 3 when a run was skipped as busy.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// printedError is a failure whose -json document (which says what failed)
// is already on stdout: one document per command, so no {"error"} follows.
type printedError struct{ err error }

func (e printedError) Error() string { return e.err.Error() }

// wantsJSON says whether the command line asks for -json output.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-json", "--json", "-json=true", "--json=true":
			return true
		}
	}
	return false
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// build is what the binary was built from.
type build struct{ version, revision, goVersion string }

// packageVersion is the version packaging/build gives its binaries (with
// -ldflags -X main.packageVersion=...), which their packages carry; a
// binary built otherwise says its module version.
var packageVersion string

func readBuild() build {
	b := build{version: "(unknown)", goVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.version = bi.Main.Version
	if packageVersion != "" {
		b.version = packageVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				b.revision += "+modified"
			}
		}
	}
	return b
}

// version is the module version, VCS revision and Go version the binary
// was built from.
func version() string {
	b := readBuild()
	return strings.Join(strings.Fields("tickd "+b.version+" "+b.revision+" "+b.goVersion), " ")
}

// printJSON writes an operator command's result as JSON, for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
