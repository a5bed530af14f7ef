package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

const usage = `tickd — recurring singleton tasks under Redis leases

Usage:
  tickd [run] -config FILE          run the daemon (the default command)
  tickd check -config FILE          validate; print each task's next 5 ticks
  tickd status -config FILE [TASK]  held leases, last runs, pending requests (-json)
  tickd trigger -config FILE TASK [ENTITY…]   ask for a run now (-wait)
  tickd pause|resume -config FILE TASK        stop/start ticking on every replica
  tickd unlock -config FILE TASK ENTITY       force-release a stuck lease
  tickd lock -config FILE [-ttl 1m] [-busy-exit N] KEY -- CMD ARGS…
                                    run CMD under a lease, or exit at once if held

Run "tickd COMMAND -h" for a command's flags.
`

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

// run dispatches a subcommand and turns its error into an exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runDaemon(ctx, args, stderr)
	case "check":
		err = runCheck(args, stdout, stderr)
	case "status":
		err = runStatus(ctx, args, stdout, stderr)
	case "trigger":
		err = runTrigger(ctx, args, stdout, stderr)
	case "pause", "resume":
		err = runPause(ctx, args, stdout, stderr, cmd == "pause")
	case "unlock":
		err = runUnlock(ctx, args, stdout, stderr)
	case "lock":
		err = runLock(ctx, args, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tickd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, errTriggerSkipped):
		return 3
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tickd %s: %v\n", cmd, err)
	return 1
}

// flags makes a FlagSet with -config.
func flags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", "/etc/tickd/config.toml", "config file")
	return fs, cfg
}

// jsonFlag adds -json to an operator command.
func jsonFlag(fs *flag.FlagSet) *bool { return fs.Bool("json", false, "print JSON for scripts") }

// printJSON writes an operator command's result as JSON, for scripts.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
