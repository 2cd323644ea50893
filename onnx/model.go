package onnx

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// Model is an ONNX model read by Load or Parse, ready to build graphs for
// any batch size (and, where the file's sequence axis is symbolic, any
// sequence length). It implements predict.Source.
type Model struct {
	name, path string
	// IRVersion and Opset are the file's ir_version and the version of the
	// default ONNX operator set it imports.
	IRVersion int64
	Opset     int64
	// Producer is producer_name and producer_version ("pytorch 1.13.0").
	Producer string

	inputs []Input
	// batchName is the dim_param of the batch axis ("" when the file's
	// batch is fixed: exportBatch then holds it).
	batchName   string
	exportBatch int64
	// seqName is the dim_param of a symbolic sequence axis; seqLen is the
	// length of a fixed one (0 when there is none).
	seqName string
	seqLen  int64
	image   [2]int64 // H, W of a 4-D image input

	steps   []step
	nslots  int
	out     *value
	paramDT graph.DType
	notes   []string
	counts  map[string]int // ONNX operator histogram
}

// Input describes one data input of the model.
type Input struct {
	Name  string
	DType graph.DType
	// Shape is symbolic: "batch" and "seq" name the substituted axes.
	Shape string
}

// step is one part of building the graph, prepared by the conversion:
// ONNX shape inference happened once, at load time, symbolically; a step
// only evaluates the symbolic sizes and calls the Builder.
type step func(c *bctx)

type bctx struct {
	b    *graph.Builder
	n, s int64
	ids  []graph.TensorID
}

// dims evaluates a symbolic shape at the build's batch and sequence length.
func (c *bctx) dims(s shape, what string) []int64 {
	v, ok := s.eval(c.n, c.s)
	if !ok {
		c.b.Fail("%s: shape %v overflows at batch %d", what, s, c.n)
		return nil
	}
	return v
}

func (c *bctx) eval(d dim, what string) int64 {
	v, ok := d.eval(c.n, c.s)
	if !ok {
		c.b.Fail("%s: size %v overflows at batch %d", what, d, c.n)
	}
	return v
}

// set records the builder's tensor for v and checks that the Builder's
// shape agrees with the ONNX shape inference.
func (c *bctx) set(v *value, id graph.TensorID) {
	c.ids[v.slot] = id
	if c.b.Err() != nil {
		return
	}
	want, ok := v.shape.eval(c.n, c.s)
	got := c.b.Shape(id)
	if !ok || len(got) != len(want) {
		c.b.Fail("%s: the graph has shape %v where ONNX shape inference has %v", v.name, got, v.shape)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			c.b.Fail("%s: the graph has shape %v where ONNX shape inference has %v", v.name, got, v.shape)
			return
		}
	}
}

// Name is the file's base name without the extension.
func (m *Model) Name() string { return m.name }

// Path is the name Load or Parse was given.
func (m *Model) Path() string { return m.path }

// Inputs lists the data inputs (not the weights).
func (m *Model) Inputs() []Input { return append([]Input(nil), m.inputs...) }

// Notes lists what the conversion could not know from the file and how it
// decided (for example a dropout an eval-mode export removed).
func (m *Model) Notes() []string { return append([]string(nil), m.notes...) }

// OpCounts is the number of nodes of each ONNX operator type.
func (m *Model) OpCounts() map[string]int {
	out := make(map[string]int, len(m.counts))
	for k, v := range m.counts {
		out[k] = v
	}
	return out
}

// DefaultSeq is the exported sequence length when the file fixes it, and 0
// otherwise (a symbolic sequence axis needs Config.Seq).
func (m *Model) DefaultSeq() int64 { return m.seqLen }

// Dims lists the dimensions besides batch the model can vary: the sequence
// length when the file declares the sequence axis symbolic.
func (m *Model) Dims() []models.Dim {
	if m.seqName != "" {
		return []models.Dim{models.DimSeq}
	}
	return nil
}

// Build builds the training graph at c.Batch (and c.Seq for a symbolic
// sequence axis): the forward pass of the file followed by the loss (see
// the package documentation).
func (m *Model) Build(c models.Config) (*graph.Graph, error) {
	if c.Batch <= 0 {
		return nil, fmt.Errorf("%s: batch size must be positive, got %d", m.name, c.Batch)
	}
	if c.Layers != 0 || c.Hidden != 0 {
		return nil, fmt.Errorf("%s: the layers and hidden size of an ONNX model are fixed by the file", m.name)
	}
	if c.Adapters != nil {
		// An export's Gemm and MatMul nodes have no module to target, and
		// which initializers are trainable is not in the file.
		return nil, fmt.Errorf("%s: LoRA and frozen layers need a model built by name (a zoo name, a Hugging Face config or a YAML spec), not an ONNX graph", m.name)
	}
	if c.Image != 0 && (m.image[0] == 0 || c.Image != m.image[0] || c.Image != m.image[1]) {
		return nil, fmt.Errorf("%s: the image size is fixed by the ONNX file (input %s)", m.name, m.inputShapes())
	}
	seq := int64(0)
	switch {
	case m.seqName != "":
		seq = c.Seq
		if seq <= 0 {
			return nil, fmt.Errorf("%s: the sequence axis %q is symbolic; give a sequence length", m.name, m.seqName)
		}
	case c.Seq != 0 && m.seqLen != 0 && c.Seq != m.seqLen:
		// (A model without a sequence axis ignores Config.Seq, as the
		// zoo's vision models do.)
		return nil, fmt.Errorf("%s: the sequence length is fixed to %d by the ONNX file (exported without a dynamic sequence axis)", m.name, m.seqLen)
	}
	b := graph.NewBuilder(m.name)
	b.ParamDT = m.paramDT
	bc := &bctx{b: b, n: c.Batch, s: seq, ids: make([]graph.TensorID, m.nslots)}
	for i := range bc.ids {
		bc.ids[i] = graph.None
	}
	for _, st := range m.steps {
		st(bc)
		if b.Err() != nil {
			break
		}
	}
	if b.Err() == nil {
		m.loss(bc)
	}
	return b.Graph()
}

func (m *Model) inputShapes() string {
	parts := make([]string, len(m.inputs))
	for i, in := range m.inputs {
		parts[i] = in.Name + " " + in.Shape
	}
	return strings.Join(parts, ", ")
}

// loss adds the training loss on the model's first output: cross_entropy
// with int64 class targets for logits [N, C] (or [N, ..., C], flattened to
// [N·..., C] as the masked-LM losses of transformers do), mse_loss against
// a float target of the output's shape for outputs of rank 0 or 1.
func (m *Model) loss(c *bctx) {
	b := c.b
	out := c.ids[m.out.slot]
	s := b.Shape(out)
	switch {
	case len(s) == 2:
		y := b.Target("y", graph.Shape{s[0]}, graph.I64)
		b.CrossEntropy("loss", out, y)
	case len(s) > 2:
		v := s[len(s)-1]
		rows := graph.Shape(s[:len(s)-1]).Numel()
		y := b.Target("y", graph.Shape(s[:len(s)-1]).Clone(), graph.I64)
		b.Scope("loss", func() {
			flat := b.Reshape("view_logits", out, rows, v)
			target := b.Reshape("view_labels", y, rows)
			b.CrossEntropy("cross_entropy", flat, target)
		})
	default:
		y := b.Target("y", graph.Shape(s).Clone(), graph.F32)
		b.MSELoss("loss", out, y)
	}
}
