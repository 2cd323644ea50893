//go:build unix

package live

import (
	"io/fs"
	"os"
	"syscall"
)

// ownedByOther reports whether another user owns the file: on a shared
// machine, a runs directory someone else made could be read or redirected
// by them.
func ownedByOther(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) != os.Getuid()
}
