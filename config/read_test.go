package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestOnlyARegularFileOfSaneSizeIsRead: a FIFO (no writer), a directory, a
// file past maxConfigBytes, and a file nested past maxNesting (the
// review's 400 KB that took the parser 18.6 GB) are refused at once, with
// a clear error, before the parser sees them.
func TestOnlyARegularFileOfSaneSizeIsRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, []byte("# "+strings.Repeat("x", maxConfigBytes)+"\n"), 0o600) //nolint:errcheck
	deep := filepath.Join(dir, "deep.toml")
	os.WriteFile(deep, []byte("[[tasks]]\nname = \"a\"\nx = "+strings.Repeat("[", 200000)+"\n"), 0o600) //nolint:errcheck
	for path, want := range map[string]string{fifo: "not a regular file", dir: "not a regular file",
		big: "larger than 4 MiB", deep: "deep.toml:3: arrays or inline tables nested deeper than 16"} {
		began := time.Now()
		_, err := Load(path)
		expect.True(t, filepath.Base(path)+": "+errString(err), err != nil && strings.Contains(err.Error(), want))
		expect.True(t, filepath.Base(path)+" refused at once", time.Since(began) < 2*time.Second)
	}
	// A quote inside a multi-line string does not end it: the nesting
	// after it is seen (before, the check took the rest of the file for a
	// string, and a 24 KB config ran tickd check out of memory).
	for _, q := range []string{`"""`, "'''"} {
		tricky := filepath.Join(dir, "tricky.toml")
		os.WriteFile(tricky, []byte("[[tasks]]\nname = \"a\"\ndesc = "+q+"\na \" ' \\\" b \""+q+"\nx = "+strings.Repeat("[", 20000)+"\n"), 0o600) //nolint:errcheck
		_, err := Load(tricky)
		expect.True(t, q+": "+errString(err), err != nil && strings.Contains(err.Error(), "tricky.toml:5: arrays or inline tables nested deeper than 16"))
	}
	// A string or a comment may hold brackets.
	ok := filepath.Join(dir, "ok.toml")
	os.WriteFile(ok, []byte("# [[[[[[[[[[[[[[[[[[[[\n[[tasks]]\nname = \"a\"\nevery = \"1m\"\ncommand = [\"echo\", \"[[[[[[[[[[[[[[[[[[[[\"]\n"), 0o600) //nolint:errcheck
	_, err := Load(ok)
	expect.True(t, "brackets in strings and comments: "+errString(err), err == nil)
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
