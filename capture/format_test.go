package capture

import (
	"bytes"
	"compress/gzip"
	"os"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// TestBuildHandWritten maps a hand-written recording of
// F.linear → relu_ → cross_entropy: the linear call is one Linear op over
// the parameters (its aten t and addmm are not ops of their own), relu_
// writes its input, and at batch 7 the batch-linear sizes follow.
func TestBuildHandWritten(t *testing.T) {
	m, err := Load("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, op := range g.Ops {
		kinds = append(kinds, string(op.Kind))
	}
	if got, want := strings.Join(kinds, " "), "linear relu cross_entropy"; got != want {
		t.Errorf("ops %q, want %q", got, want)
	}
	if got := g.ParamCount(); got != 15 {
		t.Errorf("%d parameters, want 3×4+3 = 15", got)
	}
	in := g.Tensors[g.Inputs[0]]
	if !equal(in.Shape, graph.Shape{7, 4}) {
		t.Errorf("input %v at batch 7, want [7 4]", in.Shape)
	}
	lin := g.Ops[0]
	if g.Tensors[lin.Weight].Name != "fc.weight" || g.Tensors[lin.Bias].Name != "fc.bias" || !equal(g.Tensors[lin.Output].Shape, graph.Shape{7, 3}) {
		t.Errorf("linear: weight %s, bias %s, output %v", g.Tensors[lin.Weight].Name, g.Tensors[lin.Bias].Name, g.Tensors[lin.Output].Shape)
	}
	relu := g.Ops[1]
	if !relu.Attr.Inplace || g.Storage(relu.Output) != lin.Output {
		t.Errorf("relu_ is not in place on the linear's output")
	}
	if g.Loss != g.Ops[2].Output {
		t.Errorf("the loss is not the cross_entropy's output")
	}
}

func equal(a, b graph.Shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadErrors: a bad file is refused in one line that says where and
// what was expected.
func TestReadErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) string {
		if !strings.Contains(string(good), old) {
			t.Fatalf("the test file has no %q", old)
		}
		return strings.Replace(string(good), old, new, 1)
	}
	cases := []struct{ name, data, want string }{
		{"empty", "", "malformed JSON"},
		{"not json", "{\n\"format\": \"batchfit-graph\",\n oops}", "line 3"},
		{"other format", edit(`"format": "batchfit-graph"`, `"format": "onnx"`), `format "onnx": not a batchfit graph file`},
		{"future version", edit(`"version": 1`, `"version": 9`), "version 9: this batchfit reads version 1"},
		{"wrong type", edit(`"version": 1`, `"version": "one"`), `field "version"`},
		{"batches", edit(`"captured": [`, `"captured": [3, `), "want two increasing batch sizes"},
		{"tensor out of range", edit(`"args": [{"t": 0}]`, `"args": [{"t": 99}]`), "tensor 99 out of range"},
		{"unknown op", edit(`"aten": "aten::relu_"`, `"aten": "aten::frobnicate_"`), `op aten::frobnicate_ (module "") has no rule in batchfit`},
		{"role", edit(`"role": "input"`, `"role": "weights"`), `role "weights"`},
		{"dtype", edit(`"dtype": "int64"`, `"dtype": "int3"`), `unknown dtype "int3"`},
		{"no loss", edit(`"loss": 7,`, ``), "no loss"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read("x.bfgraph", strings.NewReader(c.data))
			if err == nil {
				t.Fatalf("no error, want one containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "x.bfgraph") {
				t.Errorf("error %q: want one line naming the file and containing %q", err, c.want)
			}
		})
	}
}

// TestReadGzip: a gzip'd file reads as the plain one.
func TestReadGzip(t *testing.T) {
	data, _ := os.ReadFile("testdata/linear.bfgraph")
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	z.Write(data)
	z.Close()
	m, err := Read("linear.bfgraph.gz", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Ops() != 5 || m.Name() != "Linear" {
		t.Errorf("%d ops, name %q", m.Ops(), m.Name())
	}
}

// FuzzRead: no input makes Read panic or hang.
func FuzzRead(f *testing.F) {
	data, _ := os.ReadFile("testdata/linear.bfgraph")
	f.Add(data)
	f.Add([]byte(`{"format":"batchfit-graph","version":1,"batch":{"captured":[2,3]},"tensors":[],"ops":[],"loss":0}`))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	// one seed per shape of hostile file (hostile_test.go), and a small
	// bomb of ops
	for _, c := range hostileCases {
		f.Add(bytes.Replace(data, []byte(c.old), []byte(c.new), 1))
	}
	f.Add(bomb(f, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Read("fuzz.bfgraph", bytes.NewReader(b))
		if err == nil {
			for _, n := range []int64{1, 5} {
				_, _ = m.Build(models.Config{Batch: n})
			}
		}
	})
}
