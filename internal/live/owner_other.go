//go:build !unix

package live

import "io/fs"

// ownedByOther is false where files carry no Unix owner (Windows): the
// directory's permissions, checked by ownDir, are what there is.
func ownedByOther(fs.FileInfo) bool { return false }
