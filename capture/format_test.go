package capture

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
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
		{"unknown op", edit(`"aten": "aten::relu_"`, `"aten": "aten::frobnicate_"`), `op aten::frobnicate_ (module <root: Net>) has no rule in batchfit`},
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

// withUnknownOps is testdata/linear.bfgraph with three ops batchfit has
// no rule for, on the input (which does not require grad), before the
// linear: aten::frobnicate twice (tensor 2 → 10 → 11) and the custom
// op mylib::fuse with its overload in the name (2 → 12), each result a
// [batch, 4] float32 tensor.
func withUnknownOps(t *testing.T) []byte {
	good, err := os.ReadFile("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	tensor := func(id int) string {
		return fmt.Sprintf(`, {"id": %d, "shape": [2, 4], "batch": [1, 0], "stride": [4, 1], "offset": 0, "dtype": "float32", "storage": %d, "storage_nbytes": 32, "storage_nbytes_batch": 16, "role": "activation", "requires_grad": false}`, id, id-2)
	}
	op := func(name string, in, out int) string {
		return fmt.Sprintf(`{"aten": %q, "overload": "", "args": [{"t": %d}], "out": [%d], "module": "", "grad": true}, `, name, in, out)
	}
	for _, e := range []struct{ old, new string }{
		{`"requires_grad": false}], "ops": [`, `"requires_grad": false}` + tensor(10) + tensor(11) + tensor(12) + `], "ops": [`},
		{`"ops": [`, `"ops": [` + op("aten::frobnicate", 2, 10) + op("aten::frobnicate", 10, 11) + op("mylib::fuse.out", 2, 12)},
	} {
		if !strings.Contains(s, e.old) {
			t.Fatalf("the test file has no %q", e.old)
		}
		s = strings.Replace(s, e.old, e.new, 1)
	}
	return []byte(s)
}

// Ops without a rule that make no autograd node are mapped by the
// default, and the reader says which: the clean file has none, the file
// with aten::frobnicate twice and mylib::fuse.out once lists them, most
// first, and its note counts 3 ops. The graph is the clean one's with
// the three results as new tensors (graph.Full) before it; the file
// records no freed_after for them, so the output holds them to the
// forward's end (a release after the loss, TestOutputHeldToForwardEnd).
func TestUnknownOps(t *testing.T) {
	clean, err := Load("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	if ops, note := clean.UnknownOps(), clean.Note(); len(ops) != 0 || note != "" {
		t.Errorf("the clean file: unknown ops %v, note %q", ops, note)
	}
	m, err := Read("unknown.bfgraph", bytes.NewReader(withUnknownOps(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := []UnknownOp{{"aten::frobnicate", 2}, {"mylib::fuse.out", 1}}
	if got := m.UnknownOps(); !slices.Equal(got, want) {
		t.Errorf("unknown ops %v, want %v", got, want)
	}
	if note := m.Note(); !strings.HasPrefix(note, "3 ops batchfit has no rule for: aten::frobnicate (2), mylib::fuse.out: each treated as ") {
		t.Errorf("note %q", note)
	}
	g, err := m.Build(models.Config{Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, op := range g.Ops {
		kinds = append(kinds, string(op.Kind))
	}
	if got, want := strings.Join(kinds, " "), "full full full linear relu cross_entropy release"; got != want {
		t.Errorf("ops %q, want %q", got, want)
	}
	// A later build finds the same ops: the counts are the file's, not
	// summed over builds.
	if got := m.UnknownOps(); !slices.Equal(got, want) {
		t.Errorf("after a second build: unknown ops %v, want %v", got, want)
	}
}

// An overload written in the name is the overload field's: aten::t.default
// and aten::addmm.default read as the clean file, whose linear they are.
func TestOverloadInName(t *testing.T) {
	good, err := os.ReadFile("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(good), `"aten": "aten::t", "overload": "default"`, `"aten": "aten::t.default", "overload": ""`, 1)
	s = strings.Replace(s, `"aten": "aten::addmm", "overload": "default"`, `"aten": "aten::addmm.default", "overload": "default"`, 1)
	if s == string(good) {
		t.Fatal("the test file's ops were not edited")
	}
	m, err := Read("overload.bfgraph", strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	if ops := m.UnknownOps(); len(ops) != 0 {
		t.Errorf("unknown ops %v, want none", ops)
	}
	g, err := m.Build(models.Config{Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Ops) != 3 || g.Ops[0].Kind != graph.Linear {
		t.Errorf("%d ops, the first %s; want linear, relu, cross_entropy", len(g.Ops), g.Ops[0].Kind)
	}
}

// The ops without a rule reach a prediction's typed notes (predict.Noter),
// which estimate's --json prints as "notes": the file of TestUnknownOps
// predicted at batch 7 carries its note, word for word.
func TestUnknownOpsReachTheNotes(t *testing.T) {
	m, err := Read("unknown.bfgraph", bytes.NewReader(withUnknownOps(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := m.Note()
	res, err := predict.Run(context.Background(), predict.Request{Source: m, Config: models.Config{Batch: 7}, GPU: gpu.GPU{Name: "test", Capacity: 1 << 40, Major: 9}, Context: 0,
		Setup: train.Setup{Optimizer: train.Optimizer{Kind: train.Adam}}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range res.Notes {
		found = found || n.Text == want
	}
	if want == "" || !found {
		t.Errorf("the note %q is not among the prediction's notes %v", want, res.Notes)
	}
}
