package console

import (
	"os"
	"syscall"
)

// inode is fi's inode number: a file replaced by a rename (as editors and
// htpasswd do) is a new version even with the same size and time.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
