package tasks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/tickd/tickd/internal/regular"
)

// Source yields a task's entity ids, one at a time, so that a source of a
// million ids never sits in memory whole. fn returning an error stops it.
type Source interface {
	Each(ctx context.Context, fn func(id string) error) error
}

// Static is a fixed list of ids.
type Static []string

// Each yields the ids in order.
func (s Static) Each(ctx context.Context, fn func(string) error) error {
	for _, id := range s {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// File reads entities from a file, one a line: ids, or JSON objects with
// attributes (Format).
type File struct {
	Path   string
	Format string // FormatLines ("" too) or FormatJSONL
	Log    *slog.Logger
}

// Each streams the file's ids.
func (f File) Each(ctx context.Context, fn func(string) error) error {
	return f.EachEntity(ctx, func(e Entity) error { return fn(e.ID) })
}

// EachEntity streams the file's entities.
func (f File) EachEntity(ctx context.Context, fn func(Entity) error) error {
	fh, err := regular.Open(f.Path, regular.MaxEntitiesFile)
	if err != nil {
		return fmt.Errorf("entities_file: %w", err)
	}
	defer fh.Close()
	return entityLines(ctx, newLineReader(fh, f.Path, f.Format, f.Log), f.Format, fn)
}

// Command runs argv (no shell) and reads entities from its stdout, one a
// line: ids, or JSON objects with attributes (Format). The command is
// killed after Timeout; a non-zero exit is an error reported after the
// entities it printed were used.
type Command struct {
	Argv    []string
	Timeout time.Duration
	Format  string // FormatLines ("" too) or FormatJSONL
	Log     *slog.Logger
}

// Each streams the command's ids.
func (c Command) Each(ctx context.Context, fn func(string) error) error {
	return c.EachEntity(ctx, func(e Entity) error { return fn(e.ID) })
}

// EachEntity streams the command's entities.
func (c Command) EachEntity(ctx context.Context, fn func(Entity) error) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Timeout, fmt.Errorf("entities_command timed out after %v", c.Timeout))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &limitWriter{w: &stderr, n: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("entities_command: %w", err)
	}
	scanErr := entityLines(ctx, newLineReader(out, c.Argv[0], c.Format, c.Log), c.Format, fn)
	if scanErr != nil {
		// Stop the command: its remaining output is not wanted.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		io.Copy(io.Discard, out)                        //nolint:errcheck
	}
	waitErr := cmd.Wait()
	if scanErr != nil {
		return scanErr
	}
	if ctx.Err() != nil {
		return fmt.Errorf("entities_command: %w", context.Cause(ctx))
	}
	if waitErr != nil {
		return fmt.Errorf("entities_command %s: %w: %s", c.Argv[0], waitErr, strings.TrimSpace(stderr.String()))
	}
	return nil
}

type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		q := p
		if len(q) > l.n {
			q = q[:l.n]
		}
		l.n -= len(q)
		l.w.Write(q) //nolint:errcheck
	}
	return len(p), nil
}

// maxIDLen bounds an entity id read from a file or command.
const maxIDLen = 64 * 1024

// ErrBadID describes an id line that was skipped.
var ErrBadID = errors.New("bad entity id")

// CheckID says why an id cannot be used, or nil: ids must be valid UTF-8,
// hold no NUL (argv cannot carry it) and be at most maxIDLen bytes.
func CheckID(id string) error {
	switch {
	case len(id) > maxIDLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrBadID, maxIDLen)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%w: holds a NUL byte", ErrBadID)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not valid UTF-8", ErrBadID)
	}
	return nil
}

// lineReader reads a source's lines: trailing \r is dropped, blank lines
// are passed over, and the lines skipped are reported (the first few,
// then a count).
type lineReader struct {
	br        *bufio.Reader
	name      string
	log       *slog.Logger
	max       int // a longer line is kept cut past max, to be refused
	line, bad int
}

func newLineReader(r io.Reader, name, format string, log *slog.Logger) *lineReader {
	max := maxIDLen
	if format == FormatJSONL {
		max = maxJSONLine
	}
	return &lineReader{br: bufio.NewReaderSize(r, 64*1024), name: name, log: log, max: max}
}

// next returns the next line that is not blank, and its number; io.EOF
// at the end is nil.
func (r *lineReader) next() (string, int, error) {
	for {
		s, err := readLine(r.br, r.max)
		if s == "" && err != nil {
			if errors.Is(err, io.EOF) {
				err = errEnd
			}
			return "", r.line, err
		}
		r.line++
		s = strings.TrimRight(s, "\r")
		if strings.TrimSpace(s) != "" {
			return s, r.line, nil
		}
	}
}

// errEnd ends a source's lines: entityLines returns nil for it.
var errEnd = errors.New("end of the lines")

// skip reports line, skipped for why.
func (r *lineReader) skip(line int, why error) {
	r.bad++
	if r.bad <= 3 && r.log != nil {
		r.log.Warn("skipping entity id", "source", r.name, "line", line, "error", why)
	}
}

// done reports how many lines were skipped.
func (r *lineReader) done() {
	if r.bad > 0 && r.log != nil {
		r.log.Warn("entity source had bad lines", "source", r.name, "bad_lines", r.bad)
	}
}

// readLine reads a line of any length (without its newline); a line longer
// than max is returned truncated past it, so that it is refused.
func readLine(br *bufio.Reader, max int) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(b) <= max {
			b = append(b, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(b) > 0 && b[len(b)-1] == '\n' {
			b = b[:len(b)-1]
		}
		if err != nil && len(b) > 0 {
			return string(b), nil // last line without a newline
		}
		return string(b), err
	}
}
