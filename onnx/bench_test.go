package onnx_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
)

// chain is a synthetic model of n blocks Gemm(width→width) + Relu (2n
// nodes), its weights stripped, as torch exports an MLP.
func chain(t testing.TB, n int, width int64) []byte {
	b := newModel(14).input("input", tFloat, "batch", width)
	h := "input"
	for i := 0; i < n; i++ {
		w, bias := fmt.Sprintf("layers.%d.weight", i), fmt.Sprintf("layers.%d.bias", i)
		g, r := fmt.Sprintf("/layers.%d/Gemm_output_0", i), fmt.Sprintf("/act.%d/Relu_output_0", i)
		b.weight(w, width, width).weight(bias, width).
			node("Gemm", fmt.Sprintf("/layers.%d/Gemm", i), ins(h, w, bias), ins(g), aInt("transB", 1), aFloat("alpha", 1), aFloat("beta", 1)).
			node("Relu", fmt.Sprintf("/act.%d/Relu", i), ins(g), ins(r))
		h = r
	}
	b.output(h)
	return b.bytes(t)
}

// BenchmarkLoad10k: Parse and Build of a 10,000-node model at batch 1.
func BenchmarkLoad10k(b *testing.B) {
	benchLoad(b, chain(b, 5000, 64))
}

// BenchmarkLoadScaling: Parse and Build of chains of 10 thousand to one
// million nodes; time and bytes per node stay flat when import is linear
// in the graph's size (docs/performance.md).
func BenchmarkLoadScaling(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		data := chain(b, n/2, 8)
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			benchLoad(b, data)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
		})
	}
}

// benchLoad times Parse and Build at batch 1 of a serialized model.
func benchLoad(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := onnx.Parse(data, "chain.onnx")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Build(models.Config{Batch: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestChain10k keeps the benchmark's model honest: 10,000 nodes, every
// layer a linear with its bias.
func TestChain10k(t *testing.T) {
	m, err := onnx.Parse(chain(t, 5000, 64), "chain10k.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if c := m.OpCounts(); c["Gemm"]+c["Relu"] != 10000 {
		t.Fatalf("op counts %v", c)
	}
	g, err := m.Build(models.Config{Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.ParamCount(), int64(5000*(64*64+64)); got != want {
		t.Errorf("%d parameters, want %d", got, want)
	}
}

// TestNodeLimit: a graph with more nodes than the limit is refused with the
// count and the limit named; one at the limit loads.
func TestNodeLimit(t *testing.T) {
	data := chain(t, 50, 8) // 100 nodes
	restore := onnx.SetMaxNodes(99)
	_, err := onnx.Parse(data, "big.onnx")
	restore()
	if err == nil || !strings.Contains(err.Error(), "100 nodes, more than the limit of 99") || !strings.Contains(err.Error(), "big.onnx") {
		t.Fatalf("err = %v, want the node count and the limit", err)
	}
	defer onnx.SetMaxNodes(100)()
	if _, err := onnx.Parse(data, "big.onnx"); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}
