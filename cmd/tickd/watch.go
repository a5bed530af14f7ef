package main

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/tickd/tickd/config"
)

// watchEvery is how often [daemon] watch_config looks at the config file.
const watchEvery = time.Second

// configWatch tells when the config file's content changed, for [daemon]
// watch_config: a Kubernetes ConfigMap volume is updated by swapping a
// symlink, which sends no signal, so the file is read (through its
// symlinks) every watchEvery and its content compared. Its content, not
// its times: a swap may keep sizes and times, and an editor may rewrite a
// file unchanged. A file that cannot be read is left for the next look; a
// config that is no regular file (a FIFO) is never read here.
type configWatch struct {
	path    string
	on      func() bool // whether the config in force sets watch_config
	mu      sync.Mutex
	sum     [sha256.Size]byte // of the content last loaded or seen
	changed chan struct{}
}

// newConfigWatch starts from the file's content now: before the config is
// loaded, so that a change while it loads is seen.
func newConfigWatch(path string) *configWatch {
	w := &configWatch{path: path, changed: make(chan struct{}, 1)}
	w.look()
	return w
}

// look reads the file and takes its content as seen (as loaded, when a
// load follows: at start, on SIGHUP); it reports whether that differs from
// the content seen before.
func (w *configWatch) look() bool {
	data, ok := w.read()
	if !ok {
		return false
	}
	sum := sha256.Sum256(data)
	w.mu.Lock()
	defer w.mu.Unlock()
	differs := sum != w.sum
	w.sum = sum
	return differs
}

// read reads the config file as a load does: a regular file only, never
// blocking (a FIFO would give its content to this read, not to the load
// that needs it, or block it for good).
func (w *configWatch) read() ([]byte, bool) {
	data, err := config.ReadFile(w.path)
	return data, err == nil
}

// run looks at the file every watchEvery while on() says so, until ctx
// ends.
func (w *configWatch) run(ctx context.Context) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.on() && w.look() {
			select {
			case w.changed <- struct{}{}:
			default: // one reload is due already
			}
		}
	}
}
