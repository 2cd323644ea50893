package hf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadHeader: any bytes give a header or an error, never a panic, and
// memory stays within the input's size (the header length is checked
// against the file size before anything is allocated). An accepted header
// is consistent: sorted, disjoint, inside the file.
func FuzzReadHeader(f *testing.F) {
	hdr, n := stHeader(f, []st{{"a", "BF16", []int64{2, 3}}, {"b", "F32", nil}, {"c", "I64", []int64{0}}}, map[string]string{"format": "pt"})
	f.Add(stBytes(hdr, n))
	f.Add(stBytes(hdr, n-1))
	f.Add(stBytes([]byte(`{}`), 0))
	f.Add(stBytes([]byte(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}`), 24))
	f.Add(stBytes([]byte(`{"__metadata__": {"k": "v"}, "x": {"dtype": "F8_E5M2", "shape": [3, 0, 2], "data_offsets": [0, 0]}}`), 0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		prevEnd := int64(0)
		for _, x := range h.Tensors {
			if x.Begin < 0 || x.End < x.Begin || 8+h.HeaderLen+x.End > int64(len(data)) {
				t.Fatalf("tensor %q [%d, %d) outside a %d-byte file", x.Name, x.Begin, x.End, len(data))
			}
			if x.Begin == x.End {
				continue
			}
			if x.Begin < prevEnd {
				t.Fatalf("tensor %q overlaps its predecessor", x.Name)
			}
			prevEnd = x.End
			if x.Bytes() != x.Numel()*DTypeSize(x.DType) {
				t.Fatalf("tensor %q: %d bytes for %d elements of %s", x.Name, x.Bytes(), x.Numel(), x.DType)
			}
		}
	})
}

// FuzzLoadConfig: any bytes give a Config that builds or an error, never a
// panic. The size bounds keep every graph small whatever the numbers say.
func FuzzLoadConfig(f *testing.F) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "configs", "*", "config.json"))
	for _, p := range dirs {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, cfg := range []map[string]any{tinyLlama(), tinyGPT2(), tinyBERT("roberta"), tinyT5(), tinyNeoX(), tinyOPT(),
		with(tinyLlama(), "model_type", "gemma"), with(tinyLlama(), "model_type", "phi3", "partial_rotary_factor", 0.5),
		tinyViT(), with(tinyViT(), "image_size", []any{32, 32}, "num_labels", 1)} {
		f.Add(mustJSON(f, cfg))
	}
	f.Add([]byte(`{"model_type": "vit"}`))
	f.Add([]byte(`[]`))
	// hostile shapes: a 900 KB model_type, zero, negative, huge and
	// non-finite sizes, a deep document
	f.Add(mustJSON(f, with(tinyLlama(), "model_type", strings.Repeat("x", 900<<10))))
	f.Add(mustJSON(f, with(tinyLlama(), "num_hidden_layers", 0, "hidden_size", 0)))
	f.Add(mustJSON(f, with(tinyLlama(), "num_hidden_layers", -1, "vocab_size", -5)))
	f.Add(mustJSON(f, with(tinyLlama(), "hidden_size", 1e300, "max_position_embeddings", 9223372036854775807)))
	f.Add(mustJSON(f, with(tinyViT(), "image_size", 0, "patch_size", 0)))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": NaN, "rope_scaling": {"factor": Infinity}}`))
	f.Add([]byte(strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "fuzz/config.json")
		if err != nil {
			return
		}
		// A vision model has no default sequence; the others have one.
		if (c.ModelType == "vit") != (c.DefaultSeq == 0) || c.DefaultSeq < 0 {
			t.Fatalf("%s: default sequence %d", c.ModelType, c.DefaultSeq)
		}
	})
}
