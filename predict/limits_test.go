package predict

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// Requests beyond the bounds of work are refused at once, naming what is
// too large, whoever asks (the command line checks its flags too).
func TestRunRefusesUnboundedWork(t *testing.T) {
	mlp, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := gpu.Lookup("h100-80gb")
	gen := func(n int64) *Inference { return &Inference{Mode: ModeGenerate, NewTokens: n} }
	for _, c := range []struct {
		name string
		r    Request
		want string
	}{
		{"deep", Request{Source: Zoo{M: mlp}, Config: models.Config{Batch: 1, Layers: 1_000_000}}, "layers 1000000: at most 4096"},
		{"many steps", Request{Source: Zoo{M: mlp}, Config: models.Config{Batch: 1}, Setup: train.Setup{Steps: 5000}}, "steps 5000: at most 1000"},
		{"a long schedule", Request{Source: Zoo{M: mlp}, Schedule: make([]int64, 1001)}, "1001 batch sizes: at most 1000"},
		{"a long accumulation", Request{Source: Zoo{M: mlp}, Config: models.Config{Batch: 1}, Setup: train.Setup{Accumulate: 1 << 20}}, "accumulate 1048576: at most 65536"},
		{"a long pipeline", Request{Source: toyLlama("4.46.0"), Config: models.Config{Batch: 1, PP: 2, Stage: -1}, Setup: train.Setup{Accumulate: 4096}}, "a pipeline simulates every micro-batch, at most 1024"},
		{"a long generation", Request{Source: toyLlama("4.46.0"), Config: models.Config{Batch: 1, Seq: 8}, Infer: gen(1 << 20)}, "new tokens 1048576: at most 32768"},
		{"beams overflow", Request{Source: toyLlama("4.46.0"), Config: models.Config{Batch: 1 << 40, Seq: 8}, Infer: &Inference{Mode: ModeGenerate, NewTokens: 4, Beams: 1 << 30}}, "overflows"},
		{"a huge batch", Request{Source: Zoo{M: mlp}, Config: models.Config{Batch: 4611686018427387904}}, "x: shape [4611686018427387904, 784] of float32 is more than the 64 PiB"},
	} {
		c.r.GPU, c.r.Context = g, -1
		start := time.Now()
		_, err := Run(context.Background(), c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: refused after %s", c.name, d)
		}
	}
}

// FuzzPredictSizes drives the sizes a user controls through the whole
// prediction (graph, simulator, allocator, step time): it must answer or
// refuse, never panic, and never answer with a negative or non-finite
// figure (an overflow that wrapped).
func FuzzPredictSizes(f *testing.F) {
	f.Add(int64(64), int64(0), int64(0), int64(0), uint8(0))
	f.Add(int64(4611686018427387904), int64(0), int64(0), int64(0), uint8(0))
	f.Add(int64(200000000000), int64(0), int64(0), int64(0), uint8(0))
	f.Add(int64(1<<40), int64(1<<20), int64(1<<20), int64(2), uint8(1))
	f.Add(int64(3), int64(1<<62), int64(1<<31), int64(1000000), uint8(1))
	f.Add(int64(1<<20), int64(1<<20), int64(0), int64(0), uint8(2))
	f.Add(int64(1), int64(-5), int64(-1), int64(-1), uint8(3))
	mlp, err := models.Lookup("mlp")
	if err != nil {
		f.Fatal(err)
	}
	dev, _ := gpu.Lookup("h100-80gb")
	f.Fuzz(func(t *testing.T, batch, seq, hidden, layers int64, which uint8) {
		if layers > 8 && layers <= MaxLayers {
			layers = 1 + layers%8 // deep models are slow, not wrong: the bound is tested above
		}
		var src Source = Zoo{M: mlp}
		c := models.Config{Batch: batch, Hidden: hidden, Layers: layers}
		var in *Inference
		switch which % 4 {
		case 1:
			src = toyLlama("4.46.0")
			c = models.Config{Batch: batch, Seq: seq}
		case 2:
			src = toyLlama("4.46.0")
			c = models.Config{Batch: batch, Seq: seq}
			in = &Inference{Mode: ModeGenerate, NewTokens: min(max(hidden, 1), 16), Beams: min(max(layers, 1), 1<<40)}
		case 3:
			c.Seq = seq
		}
		res, err := Run(context.Background(), Request{Source: src, Config: c, GPU: dev, Context: -1, Infer: in, Setup: train.Setup{Accumulate: int(min(max(seq, 1), 8))}})
		if err != nil {
			return
		}
		checkFigures(t, "summary", reflect.ValueOf(res.Summary))
		tl := res.Timeline
		for _, n := range []int64{tl.PeakAllocated, tl.PeakReserved, res.DeviceTotal} {
			if n < 0 {
				t.Fatalf("batch %d seq %d hidden %d layers %d: a negative figure %d", batch, seq, hidden, layers, n)
			}
		}
		if e := res.Time; e != nil {
			for _, v := range []float64{e.Seconds, e.SamplesPerSecond(), e.TokensPerSecond(), e.FLOPs} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("batch %d seq %d hidden %d layers %d: time figure %v", batch, seq, hidden, layers, v)
				}
			}
			if e.Samples < 0 || e.Tokens < 0 {
				t.Fatalf("samples %d, tokens %d", e.Samples, e.Tokens)
			}
		}
	})
}

// checkFigures fails on a negative integer anywhere in v (a struct of
// byte and count figures).
func checkFigures(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Int64, reflect.Int:
		if v.Int() < 0 {
			t.Fatalf("%s = %d", path, v.Int())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				checkFigures(t, path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			checkFigures(t, path, v.Index(i))
		}
	}
}
