package hf

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"
)

// osFiles reads the machine's own files by the paths it is given, relative
// or absolute, as a fs.FS (which would refuse absolute paths).
type osFiles struct{}

func (osFiles) Open(name string) (fs.File, error)     { return os.Open(name) }
func (osFiles) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// readAll reads the file at path in fsys, refusing one larger than limit
// bytes (what is past the limit is never read).
func readAll(fsys fs.FS, path string, limit int64, what string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes: not %s", path, limit, what)
	}
	return data, nil
}

// Headers is a model directory held in memory: its config.json, its
// safetensors index if sharded, and of each safetensors file the header
// alone (the first 8 + length bytes) with the size of the whole file. It
// is what a browser uploads of a model directory: the headers say
// everything batchfit reads, and the weights would be gigabytes. It
// implements fs.FS for OpenFS, with the directory named Dir.
type Headers struct {
	Dir   string
	Files map[string]HeaderFile // by base name
}

// HeaderFile is one file of Headers: Data is the file or its first bytes,
// Size the whole file's size (at least len(Data)).
type HeaderFile struct {
	Data []byte
	Size int64
}

// Open implements fs.FS.
func (h *Headers) Open(name string) (fs.File, error) {
	if name == h.Dir || name == "." && h.Dir == "" {
		return &memFile{name: h.Dir, dir: true}, nil
	}
	if dir, base := path.Split(name); path.Clean(dir) == h.Dir {
		if f, ok := h.Files[base]; ok {
			if f.Size < int64(len(f.Data)) {
				return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("declared size %d is less than the %d bytes held", f.Size, len(f.Data))}
			}
			return &memFile{name: base, data: f.Data, size: f.Size}, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// memFile is a file of Headers: reads past Data end early, as a file
// whose tail was never sent.
type memFile struct {
	name string
	data []byte
	size int64
	off  int64
	dir  bool
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f, nil }
func (f *memFile) Close() error               { return nil }

func (f *memFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if f.dir {
		return 0, fmt.Errorf("%s is a directory", f.name)
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset", f.name)
	}
	if off >= int64(len(f.data)) {
		if off < f.size {
			return 0, fmt.Errorf("%s: only the first %d of %d bytes were given", f.name, len(f.data), f.size)
		}
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	switch {
	case n == len(p):
		return n, nil
	case int64(len(f.data)) < f.size:
		return n, fmt.Errorf("%s: only the first %d of %d bytes were given", f.name, len(f.data), f.size)
	}
	return n, io.EOF
}

// fs.FileInfo
func (f *memFile) Name() string       { return path.Base(f.name) }
func (f *memFile) Size() int64        { return f.size }
func (f *memFile) ModTime() time.Time { return time.Time{} }
func (f *memFile) IsDir() bool        { return f.dir }
func (f *memFile) Sys() any           { return nil }
func (f *memFile) Mode() fs.FileMode {
	if f.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
