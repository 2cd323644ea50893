package onnx_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
)

// FuzzLoad: no input makes Parse or Build panic.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("../testdata/onnx/*.onnx")
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) < 32<<10 { // the small ones: mutations of big inputs are slow
			f.Add(data)
		}
	}
	f.Add(chain(f, 3, 8))
	f.Add(padModel().bytes(f))
	f.Add([]byte{})
	f.Add([]byte("\x08\x07\x3a\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Parse(data, "fuzz.onnx")
		if err != nil {
			return
		}
		for _, batch := range []int64{1, 3} {
			c := models.Config{Batch: batch, Seq: m.DefaultSeq()}
			if len(m.Dims()) > 0 {
				c.Seq = 5
			}
			if g, err := m.Build(c); err == nil {
				if err := g.Validate(); err != nil {
					t.Fatalf("Build returned an invalid graph: %v", err)
				}
			}
		}
	})
}
