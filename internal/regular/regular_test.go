package regular

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickd/tickd/internal/testkit/expect"
)

// TestOnlyARegularFileOfBoundedSizeIsRead: a FIFO (no writer ever comes),
// a directory and a device are refused at once, and so is a file over its
// bound; a regular file within it is read.
func TestOnlyARegularFileOfBoundedSizeIsRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "not a regular file", dir: "not a regular file", "/dev/zero": "not a regular file", big: "larger than 1 KiB"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(path, 1024); done <- err }()
		select {
		case err := <-done:
			expect.True(t, path+" refused: "+errString(err), err != nil && strings.Contains(err.Error(), want))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile still blocked after 5s", path)
		}
	}
	data, err := ReadFile(ok, 1024)
	expect.True(t, "a regular file is read", err == nil && string(data) == "a\nb\n")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
