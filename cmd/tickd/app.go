package main

import (
	"context"
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
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tickd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
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

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
