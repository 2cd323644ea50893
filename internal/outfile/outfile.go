// Package outfile writes output files whole or not at all: a file is
// written beside its path and renamed over it once complete, so a command
// that fails midway (a full disk, an interrupt) leaves the file that was
// there as it was. The charts of estimate, sweep and snapshot and the
// recordings of run and watch are all written this way.
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// File is an output file written beside its path and renamed over it
// once complete: a write that fails (a full disk) or a command that stops
// midway leaves the file that was there whole, never a part of the new one
// in its place (os.WriteFile and os.Create truncate the old first). A
// rename within one directory replaces the old file in one step (POSIX
// rename(2)).
type File struct {
	*os.File
	path string
	// keep: the old file's permissions, given to the new (0: none old)
	keep fs.FileMode
}

// Create starts the output file for path. Its directory must be
// writable: that is checked now, before any work.
func Create(path string) (*File, error) {
	// A path that is a link names the file it links to: that file is
	// replaced, the link kept.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	var keep fs.FileMode
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", path)
		}
		keep = st.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// A new file is made as os.WriteFile makes one: 0644 less the umask
	// (os.CreateTemp's 0600 would hide a chart from the other users).
	dir, base := filepath.Dir(path), "."+filepath.Base(path)+"."
	for range 100 {
		f, err := os.OpenFile(filepath.Join(dir, base+strconv.FormatUint(rand.Uint64(), 36)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &File{File: f, path: path, keep: keep}, nil
	}
	return nil, fmt.Errorf("no free temporary name beside %s", path)
}

// Commit writes the file to disk and puts it in place of the old.
func (o *File) Commit() error {
	var err error
	if o.keep != 0 {
		err = o.Chmod(o.keep)
	}
	if err == nil {
		err = o.Sync() // a full disk may tell only here
	}
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.Name(), o.path)
	}
	if err != nil {
		os.Remove(o.Name())
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	return nil
}

// Abort drops the file written: the old one stays.
func (o *File) Abort() {
	o.Close()
	os.Remove(o.Name())
}

// Write writes data to path by way of a File: the old file at path stays
// whole unless all of data was written.
func Write(path string, data []byte) error {
	o, err := Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := o.Write(data); err != nil {
		o.Abort()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return o.Commit()
}
