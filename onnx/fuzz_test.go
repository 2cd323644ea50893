package onnx_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/onnx/onnxpb"
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
	// hostile shapes: an opset no exporter writes, a Conv with zero
	// strides, negative pads, a kernel larger than its input
	conv := func(opset int64, attrs ...*onnxpb.AttributeProto) []byte {
		return newModel(opset).input("img", tFloat, "batch", 3, 8, 8).
			weight("conv.weight", 4, 3, 3, 3).
			node("Conv", "/conv/Conv", ins("img", "conv.weight"), ins("c"), attrs...).
			output("c").bytes(f)
	}
	f.Add(conv(1000))
	f.Add(conv(14, aInts("strides", 0, 0)))
	f.Add(conv(14, aInts("strides", -1, -1)))
	f.Add(conv(14, aInts("pads", -5, -5, -5, -5)))
	f.Add(conv(14, aInts("kernel_shape", 99, 99)))
	f.Add(conv(14, aInts("dilations", 1<<40, 1<<40)))
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
