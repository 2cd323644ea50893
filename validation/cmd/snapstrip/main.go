// Command snapstrip turns a torch.cuda.memory._dump_snapshot pickle into
// the recording the GPU corpus keeps (testdata/gpu/recordings): the
// allocator's segments, blocks, trace entries, streams and settings, with
// every stack frame, file path, function and user name removed (see
// snapshot.WriteStripped). The output is gzip-compressed when its name ends
// in .gz, and 'batchfit snapshot' reads it like the original.
//
//	go run ./validation/cmd/snapstrip memory_snapshot.pickle testdata/gpu/recordings/ID.pickle.gz
//
// It is a command of its own rather than a flag of 'batchfit snapshot'
// because it writes the project's test data: it checks that the stripped
// file reads back to the same allocator record before keeping it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/batchfit/batchfit/snapshot"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: snapstrip SNAPSHOT.pickle OUT.pickle[.gz]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "snapstrip:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	// Frames are read and then dropped here rather than while the pickle
	// streams (Options.Frames false), which must not change what is kept.
	s, err := snapshot.ReadFile(in, snapshot.Options{Frames: true})
	if err != nil {
		return err
	}
	s.DropFrames()
	tmp, err := os.CreateTemp(filepath.Dir(out), ".snapstrip-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	write := snapshot.WriteStripped
	if strings.HasSuffix(out, ".gz") {
		write = snapshot.WriteStrippedGzip
	}
	if err := write(tmp, s); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	back, err := snapshot.ReadFile(tmp.Name(), snapshot.Options{Frames: true})
	if err != nil {
		return fmt.Errorf("reading back %s: %w", out, err)
	}
	back.Path, s.Path = "", ""
	if !reflect.DeepEqual(back, s) {
		return fmt.Errorf("%s does not read back to the allocator record of %s", out, in)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
