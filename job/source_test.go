package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/hf"
)

// A directory named like a zoo model is read as a path, and the model says
// which was taken; a name given as a path says nothing of the zoo.
func TestResolveSourceShadowsZoo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := `{"model_type": "gpt2", "vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}`
	if err := os.Mkdir("gpt2", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("gpt2", hf.ConfigName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		arg, want string
	}{
		{"gpt2", "gpt2 is the directory here, not the zoo's gpt2"},
		{"./gpt2", ""},
	} {
		src, err := Open(c.arg, Paths)
		if err != nil {
			t.Fatalf("%s: %v", c.arg, err)
		}
		m, ok := src.(*hf.Model)
		if !ok {
			t.Fatalf("%s: a %T, want the directory's model", c.arg, src)
		}
		note := strings.Join(m.Notes(), "; ")
		if c.want == "" && strings.Contains(note, "zoo") || !strings.Contains(note, c.want) {
			t.Errorf("%s: note %q, want …%s…", c.arg, note, c.want)
		}
	}
}
