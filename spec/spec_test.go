package spec

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// signature describes a graph without its names: what the simulator sees.
// The zoo and a spec name modules differently ("0.linear" and "layers.0.0")
// but must agree on everything else.
func signature(g *graph.Graph) []string {
	shape := func(id graph.TensorID) string {
		if id == graph.None {
			return "-"
		}
		t := g.Tensor(id)
		view := ""
		if t.View != graph.None {
			view = " view"
		}
		return fmt.Sprintf("%v %s %s grad=%v%s", t.Shape, t.DType, t.Role, t.RequiresGrad, view)
	}
	var sig []string
	for _, op := range g.Ops {
		var in []string
		for _, id := range op.Inputs {
			in = append(in, shape(id))
		}
		sig = append(sig, fmt.Sprintf("%s in=[%s] w=%s b=%s bufs=%d out=%s attr=%+v block=%d",
			op.Kind, strings.Join(in, "; "), shape(op.Weight), shape(op.Bias), len(op.Buffers), shape(op.Output), op.Attr, op.Block))
	}
	for _, id := range g.Params() {
		sig = append(sig, "param "+shape(id))
	}
	sig = append(sig, fmt.Sprintf("blocks=%d inputs=%d targets=%d tensors=%d", len(g.Blocks), len(g.Inputs), len(g.Targets), len(g.Tensors)))
	for _, id := range append(append([]graph.TensorID{}, g.Inputs...), g.Targets...) {
		sig = append(sig, "io "+shape(id))
	}
	return sig
}

func buildFile(t *testing.T, name string, batch, seq int64, over map[string]int64) *graph.Graph {
	t.Helper()
	s, err := ParseFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Build(batch, seq, over)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestExamplesMatchZoo(t *testing.T) {
	for _, tc := range []struct {
		file   string
		over   map[string]int64
		zoo    func(batch int64) (*graph.Graph, error)
		params int64
	}{
		// 784·1024+1024 + 3·(1024·1024+1024) + 1024·10+10
		{"mlp.yaml", nil, func(b int64) (*graph.Graph, error) { return models.MLP(b, 4, 1024) }, 3_962_890},
		// 784·64+64 + 64·64+64 + 64·10+10
		{"mlp.yaml", map[string]int64{"layers": 2, "hidden": 64}, func(b int64) (*graph.Graph, error) { return models.MLP(b, 2, 64) }, 55_050},
		{"mlp.yaml", map[string]int64{"layers": 1}, func(b int64) (*graph.Graph, error) { return models.MLP(b, 1, 1024) }, 814_090},
		// 32·3·9+32 + 64·32·9+64 + 4096·10+10
		{"simpleconv.yaml", nil, models.SimpleConv, 60_362},
	} {
		t.Run(fmt.Sprintf("%s%v", tc.file, tc.over), func(t *testing.T) {
			for _, batch := range []int64{1, 32} {
				got := buildFile(t, tc.file, batch, 0, tc.over)
				want, err := tc.zoo(batch)
				if err != nil {
					t.Fatal(err)
				}
				if got.ParamCount() != tc.params || want.ParamCount() != tc.params {
					t.Errorf("param count: spec %d, zoo %d, by hand %d", got.ParamCount(), want.ParamCount(), tc.params)
				}
				if got.Name != want.Name {
					t.Errorf("name %q, zoo %q", got.Name, want.Name)
				}
				gs, ws := signature(got), signature(want)
				if !reflect.DeepEqual(gs, ws) {
					t.Errorf("graphs differ:\nspec:\n  %s\nzoo:\n  %s", strings.Join(gs, "\n  "), strings.Join(ws, "\n  "))
				}
				if got.Bytes(graph.Buffer) != want.Bytes(graph.Buffer) {
					t.Errorf("buffer bytes %d, zoo %d", got.Bytes(graph.Buffer), want.Bytes(graph.Buffer))
				}
			}
		})
	}
}

func TestExamplesBuild(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := ParseFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); s.Name != want {
				t.Errorf("name %q, want the file's base name %q", s.Name, want)
			}
			for _, batch := range []int64{1, 7} {
				g, err := s.Build(batch, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := g.Validate(); err != nil {
					t.Fatal(err)
				}
				if g.Tensor(g.Inputs[0]).Shape[0] != batch {
					t.Errorf("input %v does not start with the batch %d", g.Tensor(g.Inputs[0]).Shape, batch)
				}
			}
		})
	}
}

// TestTinyGPTByHand checks the transformer example's parameter count,
// worked out from the layer definitions for vocab V=100, dim D=16, heads
// 2, 2 layers and 1024 positions.
func TestTinyGPTByHand(t *testing.T) {
	const V, D, P = 100, 16, 1024
	block := 2*D + // layernorm weight and bias
		(3*D*D + 3*D) + (D*D + D) + // attention: qkv and proj, with biases
		2*D + // layernorm
		(4*D*D + 4*D) + (4*D*D + D) // MLP: D→4D and 4D→D, with biases
	want := int64(V*D + P*D + 2*block + 2*D + V*D) // embeddings, 2 blocks, final norm, head without bias
	if want != 26_176 {
		t.Fatalf("arithmetic: %d", want)
	}
	g := buildFile(t, "tinygpt.yaml", 3, 64, map[string]int64{"vocab": V, "dim": D, "heads": 2, "layers": 2})
	if g.ParamCount() != want {
		t.Errorf("param count %d, want %d", g.ParamCount(), want)
	}
	if len(g.Blocks) != 2 || g.Blocks[0] != "layers.0" || g.Blocks[1] != "layers.1" {
		t.Errorf("blocks %v", g.Blocks)
	}
	x := g.Tensor(g.Inputs[0])
	if !reflect.DeepEqual(x.Shape, graph.Shape{3, 64}) || x.DType != graph.I64 {
		t.Errorf("input %v %s, want [3, 64] int64", x.Shape, x.DType)
	}
	y := g.Tensor(g.Targets[0])
	if !reflect.DeepEqual(y.Shape, graph.Shape{3, 64}) || y.DType != graph.I64 {
		t.Errorf("targets %v %s, want [3, 64] int64", y.Shape, y.DType)
	}
	loss := g.Ops[len(g.Ops)-1]
	if loss.Kind != graph.CrossEntropy || !reflect.DeepEqual(g.Tensor(loss.Inputs[0]).Shape, graph.Shape{3 * 64, V}) {
		t.Errorf("loss %s of %v", loss.Kind, g.Tensor(loss.Inputs[0]).Shape)
	}
	// The default sequence length is the declared seq.
	if g := buildFile(t, "tinygpt.yaml", 1, 0, nil); g.Tensor(g.Inputs[0]).Shape[1] != 256 {
		t.Errorf("default seq: input %v", g.Tensor(g.Inputs[0]).Shape)
	}
}

// TestParamCountByHand builds a small CNN whose parameters are counted
// from PyTorch's definitions:
//
//	conv2d 3→4, 3×3, bias:  4·3·3·3 + 4 = 112
//	batchnorm2d(4):         weight 4 + bias 4 = 8 (running stats are buffers)
//	maxpool2d 2:            8×8 → 4×4, no parameters
//	flatten:                4·4·4 = 64 features
//	linear 64→10, bias:     64·10 + 10 = 650
//	total:                  112 + 8 + 650 = 770
//
// Buffers: running_mean and running_var 4 float32 each (32 bytes) and
// num_batches_tracked, one int64 (8 bytes): 40 bytes.
func TestParamCountByHand(t *testing.T) {
	s, err := Parse([]byte(`
input: {shape: [3, 8, 8]}
layers:
  - conv2d: {out: 4, kernel: 3, padding: 1}
  - batchnorm2d
  - relu
  - maxpool2d: 2
  - flatten
  - linear: 10
`), "small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Build(5, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.ParamCount() != 770 {
		t.Errorf("param count %d, want 770", g.ParamCount())
	}
	if b := g.Bytes(graph.Buffer); b != 40 {
		t.Errorf("buffer bytes %d, want 40", b)
	}
	if g.Name != "small" {
		t.Errorf("name %q, want small (from the file name)", g.Name)
	}
}

func TestParamsAndOverrides(t *testing.T) {
	s, err := ParseFile("../examples/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Params(); !reflect.DeepEqual(got, map[string]int64{"layers": 4, "hidden": 1024}) {
		t.Errorf("Params() = %v", got)
	}
	if s.UsesSeq() {
		t.Error("mlp uses seq")
	}
	s.Params()["layers"] = 99 // a copy
	g, err := s.Build(2, 0, map[string]int64{"layers": 3, "hidden": 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Blocks) != 3 || g.ParamCount() != 784*8+8+2*(8*8+8)+8*10+10 {
		t.Errorf("blocks %v params %d", g.Blocks, g.ParamCount())
	}
	// A sequence length the spec does not use is ignored.
	if _, err := s.Build(2, 128, nil); err != nil {
		t.Errorf("seq on a spec without seq: %v", err)
	}
	_, err = s.Build(2, 0, map[string]int64{"hiden": 3})
	if err == nil || !strings.Contains(err.Error(), `unknown parameter "hiden"; did you mean "hidden"? (declared: hidden, layers)`) {
		t.Errorf("unknown override: %v", err)
	}
	if _, err := ParseFile("../examples/missing.yaml"); err == nil || !strings.Contains(err.Error(), "reading spec") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := s.Build(0, 0, nil); err == nil {
		t.Error("batch 0 accepted")
	}

	gpt, err := ParseFile("../examples/tinygpt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !gpt.UsesSeq() || gpt.Params()["seq"] != 256 {
		t.Errorf("tinygpt: UsesSeq %v, params %v", gpt.UsesSeq(), gpt.Params())
	}
	for _, tc := range []struct {
		seq  int64
		over map[string]int64
		want int64
		err  string
	}{
		{0, nil, 256, ""},
		{64, nil, 64, ""},
		{0, map[string]int64{"seq": 32}, 32, ""},
		{32, map[string]int64{"seq": 32}, 32, ""},
		{64, map[string]int64{"seq": 32}, 0, "sequence length given twice"},
		{2048, nil, 0, "tinygpt.yaml:17: position_embedding: sequence length 2048 is longer than num 1024 positions"},
	} {
		g, err := gpt.Build(1, tc.seq, tc.over)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("seq %d %v: error %v, want %q", tc.seq, tc.over, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("seq %d %v: %v", tc.seq, tc.over, err)
			continue
		}
		if got := g.Tensor(g.Inputs[0]).Shape[1]; got != tc.want {
			t.Errorf("seq %d %v: input length %d, want %d", tc.seq, tc.over, got, tc.want)
		}
	}

	// seq used but not declared: Build needs it, and it may be overridden.
	noDefault, err := Parse([]byte("input: {shape: [seq], dtype: int64}\nlayers:\n  - embedding: {num: 10, dim: 4}\n"), "lm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noDefault.Build(1, 0, nil); err == nil || !strings.Contains(err.Error(), "lm.yaml: the spec uses seq") {
		t.Errorf("missing seq: %v", err)
	}
	if _, err := noDefault.Build(1, 0, map[string]int64{"seq": 5}); err != nil {
		t.Errorf("seq override: %v", err)
	}
	if g, err := noDefault.Build(1, 9, nil); err != nil || g.Tensor(g.Inputs[0]).Shape[1] != 9 {
		t.Errorf("seq 9: %v", err)
	}
}

// TestConcurrentBuilds builds one Spec from many goroutines, as a solver
// bisecting over batch sizes may (run with -race).
func TestConcurrentBuilds(t *testing.T) {
	s, err := ParseFile("../examples/tinygpt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := int64(1); i <= 8; i++ {
		go func() {
			g, err := s.Build(i, 16*i, map[string]int64{"layers": i})
			if err == nil && len(g.Blocks) != int(i) {
				err = fmt.Errorf("batch %d: %d blocks", i, len(g.Blocks))
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// A learned position table of num rows serves no longer sequence: the
// smallest table bounds it, its num may be a parameter, and a spec without
// one has no bound.
func TestSeqLimit(t *testing.T) {
	for _, c := range []struct {
		src  string
		over map[string]int64
		want int64
	}{
		{"input: {shape: [seq], dtype: int64}\nparams: {seq: 8}\nlayers:\n  - embedding: {num: 10, dim: 4}\n  - position_embedding: 64\n  - position_embedding: 32\n", nil, 32},
		{"input: {shape: [seq], dtype: int64}\nparams: {seq: 8, pos: 128}\nlayers:\n  - embedding: {num: 10, dim: 4}\n  - position_embedding: $pos\n", map[string]int64{"pos": 256}, 256},
		{"input: {shape: [seq], dtype: int64}\nparams: {seq: 8}\nlayers:\n  - embedding: {num: 10, dim: 4}\n", nil, 0},
	} {
		s, err := Parse([]byte(c.src), "lm.yaml")
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.SeqLimit(c.over)
		if err != nil || got != c.want {
			t.Errorf("%q: %d, %v; want %d", c.src, got, err, c.want)
		}
	}
}
