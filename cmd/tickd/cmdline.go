package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// cmdline is one subcommand's command line: its flags and its synopsis.
// Flags may come before, between or after the arguments; "--" ends them, so
// an argument that begins with '-' (an entity id, CMD of tickd lock) is
// given after it. Nothing that looks like a flag is taken as an argument.
type cmdline struct {
	name     string
	synopsis string // the arguments, e.g. "TASK [ENTITY…]"
	fs       *flag.FlagSet
	config   *string
	by       *string // -by, when the command has it
}

// newCmdline makes a subcommand's command line with -config.
func newCmdline(name, synopsis string) *cmdline {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the mistake and the usage itself
	c := &cmdline{name: name, synopsis: synopsis, fs: fs}
	c.config = fs.String("config", "/etc/tickd/config.toml", "config file")
	return c
}

// jsonFlag adds -json to an operator command.
func (c *cmdline) jsonFlag() *bool {
	return c.fs.Bool("json", false, "print one JSON document for scripts")
}

// byFlag adds -by: who acts, for the history's record.
func (c *cmdline) byFlag() *string {
	c.by = c.fs.String("by", "", "who does this, for the record (default: your user@host)")
	return c.by
}

// parse parses the flags wherever they are among args and returns the
// arguments, and those after "--" (rest) when the command takes them.
func (c *cmdline) parse(args []string) (pos, rest []string, err error) {
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, helpRequest{c}
			}
			return nil, nil, c.usage("%v", err)
		}
		args = c.fs.Args()
		if len(args) == 0 {
			return pos, rest, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// args parses a command that takes between min and max arguments (max < 0:
// any number); those after "--" count as arguments too.
func (c *cmdline) args(args []string, min, max int, names ...string) ([]string, error) {
	pos, rest, err := c.parse(args)
	if err != nil {
		return nil, err
	}
	if c.by != nil && *c.by == "" {
		*c.by = operator()
	}
	pos = append(pos, rest...) // "--" only protects arguments that begin with '-'
	if !c.given("config") {
		// tickd status tickd.toml: the config given as an argument.
		if i := slices.IndexFunc(pos, func(a string) bool { return strings.HasSuffix(a, ".toml") }); i >= 0 {
			return nil, c.usage("unexpected argument %q (give the config as -config %s)", pos[i], pos[i])
		}
	}
	switch {
	case len(pos) < min:
		return nil, c.usage("missing %s", strings.Join(names[len(pos):min], " and "))
	case max >= 0 && len(pos) > max:
		return nil, c.usage("unexpected argument %q", pos[max])
	}
	return pos, nil
}

// given says whether flag name was set on the command line.
func (c *cmdline) given(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// usageError is a command-line mistake: run prints it with the command's
// usage and exits 2.
type usageError struct {
	c   *cmdline
	msg string
}

func (e *usageError) Error() string { return e.msg }

// helpRequest is -h: run prints the command's usage on stdout, exit 0.
type helpRequest struct{ c *cmdline }

func (helpRequest) Error() string { return flag.ErrHelp.Error() }

func (c *cmdline) usage(format string, args ...any) error {
	return &usageError{c: c, msg: fmt.Sprintf(format, args...)}
}

// printUsage writes the command's synopsis and flags.
func (c *cmdline) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\nFlags:\n", strings.TrimSpace("tickd "+c.name+" [flags] "+c.synopsis))
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}
