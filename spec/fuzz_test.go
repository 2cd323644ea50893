package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary bytes to Parse and, when they parse, builds
// them under small limits: nothing may panic, every error must be a
// *spec.Error, and each input must finish quickly.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"input: [8]\nlayers: [linear: 2]\n",
		"input: [8]\nlayers: &a\n  - residual: *a\n",
		"input: {shape: [seq], dtype: int64}\nlayers:\n  - embedding: {num: 9, dim: 4}\n  - attention: 2\n",
		"input: [3, 8, 8]\nloss: mse\nlayers:\n  - conv2d: {out: 2, kernel: [3, 1], padding: same}\n  - maxpool2d: {kernel: 2, ceil_mode: true}\n",
		"input: [8]\nparams: {n: 3}\nlayers:\n  - repeat: $n * 2 - 1\n    block: [linear: 8, {residual: [layernorm]}]\n",
	} {
		f.Add([]byte(s))
	}
	// hostile shapes: zero, negative, huge and non-finite sizes, aliases
	// that multiply (each level names the last twice), deep nesting
	for _, s := range []string{
		"input: [0]\nlayers: [linear: 0]\n",
		"input: [-8]\nlayers: [linear: -2]\n",
		"input: [8]\nlayers: [linear: 9223372036854775807]\n",
		"input: [8]\nlayers: [{dropout: .nan}, {linear: .inf}]\n",
		"input: [8]\nlayers:\n  - repeat: 1000000000\n    block: [linear: 8]\n",
		"input: [8]\nparams: {n: 1e308}\nlayers:\n  - repeat: $n * $n\n    block: [linear: 8]\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: &d [*c, *c]\ne: &e [*d, *d]\ninput: [8]\nlayers: [linear: 8]\n",
		"input: [8]\nlayers: " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "\n",
	} {
		f.Add([]byte(s))
	}
	small := limits{ops: 20_000, elems: 1 << 30}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		s, err := Parse(data, "fuzz.yaml")
		if err != nil {
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *spec.Error", err)
			}
			return
		}
		g, err := s.build(2, 8, nil, small, nil)
		if err == nil {
			if err := g.Validate(); err != nil {
				t.Fatalf("built an invalid graph: %v", err)
			}
			if int64(len(g.Ops)) > small.ops {
				t.Fatalf("%d ops, more than the limit %d", len(g.Ops), small.ops)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}
