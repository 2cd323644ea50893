package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/batchfit/batchfit/internal/outfile"
)

// onlyFiles fails the test unless dir holds exactly the files named: no
// temporary file is left beside an output.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("%s holds %q, want %q", dir, got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("%s holds %q, want %q", dir, got, names)
		}
	}
}

// A new output file gets the mode os.WriteFile gives (0644 less the
// umask), and --timeline over an existing chart replaces it whole with no
// file left beside it.
func TestWriteTimelineOverOld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ref := filepath.Join(t.TempDir(), "ref")
	if err := os.WriteFile(ref, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ := os.Stat(ref)
	path := filepath.Join(dir, "t.svg")
	if err := outfile.Write(path, []byte("<svg/>")); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != want.Mode().Perm() {
		t.Errorf("a new output's mode is %v, want %v as os.WriteFile makes", st.Mode().Perm(), want.Mode().Perm())
	}
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := run("estimate", "mlp", "--gpu", "t4", "--timeline", path); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(path)
	if len(b) == 1<<20 || len(b) < 6 || string(b[:4]) != "<svg" {
		t.Errorf("the chart written is %d bytes beginning %.20q", len(b), b)
	}
	onlyFiles(t, dir, "t.svg")
}

// run --out with a command that cannot start exits 127 and leaves the
// recording that was there: the output replaces it only once the command
// has run.
func TestRunCannotStartKeepsOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "old.jsonl")
	const old = `{"kind":"run","command":["python","train.py"]}` + "\n"
	if err := os.WriteFile(out, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := run("run", "--out", out, "--", filepath.Join(dir, "no-such-command"))
	if code != 127 {
		t.Errorf("exit %d (%s), want 127", code, errs)
	}
	if b, _ := os.ReadFile(out); string(b) != old {
		t.Errorf("the recording there became %q", b)
	}
	onlyFiles(t, dir, "old.jsonl")
}
