package snapshot

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	ogórek "github.com/kisielk/og-rek"
)

// TestWriteStripped checks that a stripped snapshot reads back to the same
// allocator record — every segment, block and trace entry of every
// device, and the allocator settings — and that nothing of the stack
// frames survives: no file path, function name or directory (which is
// where user names live) appears in its bytes, plain or gzip-compressed.
func TestWriteStripped(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"fixture", pyPickle(fixture(false), 4)},
		{"fixture-many-frames", pyPickle(fixture(true), 4)},
		{"golden", golden(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig, err := Read(bytes.NewReader(tc.data), Options{Frames: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(tc.data, []byte("/work/")) {
				t.Fatal("the fixture has no file path to strip: the test would prove nothing")
			}
			want := *orig
			want.DropFrames()
			for _, gz := range []bool{false, true} {
				var buf bytes.Buffer
				write := WriteStripped
				if gz {
					write = WriteStrippedGzip
				}
				if err := write(&buf, orig); err != nil {
					t.Fatal(err)
				}
				raw := buf.Bytes()
				if gz {
					zr, err := gzip.NewReader(bytes.NewReader(raw))
					if err != nil {
						t.Fatal(err)
					}
					if raw, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range []string{"/work/", ".py", "forward", "train_step", "recurse", "CUDACachingAllocator", "filename"} {
					if bytes.Contains(raw, []byte(s)) {
						t.Errorf("gzip %v: stripped output still holds %q", gz, s)
					}
				}
				path := filepath.Join(t.TempDir(), "s.pickle")
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				back, err := ReadFile(path, Options{Frames: true})
				if err != nil {
					t.Fatalf("gzip %v: reading back: %v", gz, err)
				}
				back.Path = ""
				if !reflect.DeepEqual(back, &want) {
					diffSnapshots(t, back, &want)
					t.Errorf("gzip %v: the stripped snapshot does not read back to the original's allocator record", gz)
				}
				// The same snapshot always gives the same bytes.
				var again bytes.Buffer
				if err := write(&again, orig); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Bytes(), buf.Bytes()) {
					t.Errorf("gzip %v: two writes of one snapshot differ", gz)
				}
			}
		})
	}
}

// TestReadFileGzipErrors checks that a damaged gzip file is an error
// naming the file.
func TestReadFileGzipErrors(t *testing.T) {
	s, err := Read(bytes.NewReader(pyPickle(fixture(false), 4)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteStrippedGzip(&buf, s); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"truncated.pickle.gz": buf.Bytes()[:buf.Len()/2],
		"header.pickle.gz":    buf.Bytes()[:5],
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path, Options{}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// MaxBytes caps the decompressed input too.
	path := filepath.Join(dir, "ok.pickle.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, Options{MaxBytes: 64}); err == nil || !strings.Contains(err.Error(), "ok.pickle.gz") {
		t.Errorf("MaxBytes on a gzip file: %v", err)
	}
}

// TestDroppedFramesKeepSharedStrings: Python memoizes each string once, so
// a string first written inside a frame ("" as a frame's filename, "alloc"
// as a function's name) is read with BINGET wherever it appears later,
// also outside the frames. Dropping the frames while they stream past must
// keep those strings: the snapshot read without frames equals the one read
// with them, frames removed.
func TestDroppedFramesKeepSharedStrings(t *testing.T) {
	fr := lst(dict(kv{"filename", ""}, kv{"line", 1}, kv{"name", "alloc"}))
	v := dict(
		kv{"segments", lst(dict(
			kv{"device", 0}, kv{"address", int64(addrA)}, kv{"total_size", 2097152},
			kv{"allocated_size", 512}, kv{"active_size", 512}, kv{"requested_size", 100},
			kv{"stream", 0}, kv{"segment_type", "small"}, kv{"segment_pool_id", ogórek.Tuple{0, 0}},
			kv{"is_expandable", false}, kv{"frames", fr},
			kv{"blocks", lst(
				dict(kv{"address", int64(addrA)}, kv{"size", 512}, kv{"requested_size", 100}, kv{"state", "active_allocated"}, kv{"frames", fr}),
			)},
		))},
		kv{"device_traces", lst(lst(
			dict(kv{"action", "alloc"}, kv{"addr", int64(addrA)}, kv{"size", 100}, kv{"stream", 0}, kv{"time_us", int64(1)}, kv{"frames", fr}),
		))},
		kv{"allocator_settings", dict(kv{"PYTORCH_CUDA_ALLOC_CONF", ""}, kv{"expandable_segments", false})},
	)
	data := pyPickle(v, 4)
	with, err := Read(bytes.NewReader(data), Options{Frames: true})
	if err != nil {
		t.Fatal(err)
	}
	without, err := Read(bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatalf("without frames: %v", err)
	}
	with.DropFrames()
	if !reflect.DeepEqual(with, without) {
		diffSnapshots(t, without, with)
		t.Error("read without frames differs from read with frames, frames removed")
	}
	if without.Traces[0][0].Action != ActionAlloc || without.AllocatorSettings.AllocConf != "" {
		t.Errorf("shared strings: action %q, conf %q", without.Traces[0][0].Action, without.AllocatorSettings.AllocConf)
	}
}
