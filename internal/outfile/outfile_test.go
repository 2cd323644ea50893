package outfile

import (
	"os"
	"path/filepath"
	"testing"
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

// An output file replaces the old one whole or not at all: a write that
// stops midway (Abort, as a full disk's failed write calls it) leaves the
// old file as it was; one committed replaces it, keeping its permissions,
// and through a link replaces the file linked to.
func TestWriteOutput(t *testing.T) {
	for _, c := range []struct {
		name   string
		commit bool
		link   bool
		want   string
	}{
		{"stopped midway", false, false, "old"},
		{"committed", true, false, "new"},
		{"through a link, stopped", false, true, "old"},
		{"through a link, committed", true, true, "new"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "chart.svg")
			if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			path, files := target, []string{"chart.svg"}
			if c.link {
				path, files = filepath.Join(dir, "link.svg"), []string{"chart.svg", "link.svg"}
				if err := os.Symlink("chart.svg", path); err != nil {
					t.Fatal(err)
				}
			}
			o, err := Create(path)
			if err != nil {
				t.Fatal(err)
			}
			o.Write([]byte("ne"))
			if b, _ := os.ReadFile(target); string(b) != "old" {
				t.Fatalf("while the new file is written the old reads %q", b)
			}
			o.Write([]byte("w"))
			if c.commit {
				if err := o.Commit(); err != nil {
					t.Fatal(err)
				}
			} else {
				o.Abort()
			}
			b, _ := os.ReadFile(target)
			st, _ := os.Stat(target)
			if string(b) != c.want || st.Mode().Perm() != 0o600 {
				t.Errorf("%q mode %v, want %q mode 0600", b, st.Mode().Perm(), c.want)
			}
			if c.link {
				if l, err := os.Readlink(path); err != nil || l != "chart.svg" {
					t.Errorf("the link is now %q %v", l, err)
				}
			}
			onlyFiles(t, dir, files...)
		})
	}
	// a directory that does not exist is refused before anything is
	// written
	if _, err := Create(filepath.Join(t.TempDir(), "no", "chart.svg")); err == nil {
		t.Error("an output in a missing directory was started")
	}
}
