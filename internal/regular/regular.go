// Package regular opens and reads the files tickd is told to read (the
// config, url_file, entities_file, the htpasswd file, TLS keys, a unit's
// drop-ins) as regular files of a bounded size, without blocking: a FIFO
// at such a path would hold an open(2) until a writer comes, for ever,
// with the goroutine and its OS thread (a tick's fan-out, a reload, a
// check run by systemd's ExecReload); a device or a directory is a
// mistake, and a file far larger than any such file is one too.
package regular

import (
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxEntitiesFile bounds an entities_file (streamed, not read whole).
const MaxEntitiesFile = 256 << 20

// Open opens path to read if it is a regular file of at most max bytes,
// without blocking; the caller closes it.
func Open(path string, max int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Size() > max {
		f.Close()
		return nil, tooLarge(path, max)
	}
	return f, nil
}

// ReadFile reads path, a regular file of at most max bytes, without
// blocking.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1)) // it may have grown since
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, tooLarge(path, max)
	}
	return data, nil
}

func tooLarge(path string, max int64) error {
	if max >= 1<<20 {
		return fmt.Errorf("%s: larger than %d MiB", path, max>>20)
	}
	return fmt.Errorf("%s: larger than %d KiB", path, max>>10)
}

// KeyPair loads a TLS certificate and its key, as tls.LoadX509KeyPair
// does, from regular files of at most 1 MiB each.
func KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := ReadFile(certFile, 1<<20)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ReadFile(keyFile, 1<<20)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}
