package validation

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// rnnCudnnFile is validation/rnn_cudnn.py's output: for each RNN shape,
// what autograd packed in one training forward of the module on an H200
// (PyTorch 2.11, cuDNN 9.19) and the memory around that forward.
type rnnCudnnFile struct {
	Environment struct {
		Cudnn int    `json:"cudnn"`
		Torch string `json:"torch"`
	} `json:"environment"`
	Rows []rnnCudnnRow `json:"rows"`
}

type rnnCudnnRow struct {
	Mode          string `json:"mode"`
	Input         int64  `json:"input"`
	Hidden        int64  `json:"hidden"`
	Layers        int64  `json:"layers"`
	Bidirectional bool   `json:"bidirectional"`
	Batch         int64  `json:"batch"`
	Seq           int64  `json:"seq"`
	DType         string `json:"dtype"`
	BatchFirst    bool   `json:"batch_first"`
	Proj          int64  `json:"proj"`
	Error         string `json:"error"`
	Saved         []struct {
		Shape        []int64 `json:"shape"`
		DType        string  `json:"dtype"`
		StorageBytes int64   `json:"storage_bytes"`
		Param        bool    `json:"param"`
		Input        bool    `json:"input"`
		Dup          bool    `json:"dup"`
	} `json:"saved"`
	AllocatedBefore int64 `json:"allocated_before"`
	AllocatedAfter  int64 `json:"allocated_after"`
	OutputBytes     int64 `json:"output_bytes"`
}

func (r *rnnCudnnRow) String() string {
	return fmt.Sprintf("%s in %d hidden %d proj %d layers %d bidir %v batch %d seq %d %s batch_first %v",
		r.Mode, r.Input, r.Hidden, r.Proj, r.Layers, r.Bidirectional, r.Batch, r.Seq, r.DType, r.BatchFirst)
}

func (r *rnnCudnnRow) attr() (graph.RNNAttr, error) {
	modes := map[string]graph.RNNMode{"LSTM": graph.LSTM, "GRU": graph.GRU, "RNN_TANH": graph.RNNTanh, "RNN_RELU": graph.RNNReLU}
	m, ok := modes[r.Mode]
	if !ok {
		return graph.RNNAttr{}, fmt.Errorf("mode %q", r.Mode)
	}
	return graph.RNNAttr{Mode: m, Input: r.Input, Hidden: r.Hidden, Proj: r.Proj, Layers: r.Layers,
		Bidirectional: r.Bidirectional, BatchFirst: r.BatchFirst, Biases: true, Train: true,
		Seq: r.Seq, Batch: r.Batch}, nil
}

func loadRNNCudnn(t *testing.T) rnnCudnnFile {
	t.Helper()
	f, err := os.Open("../testdata/measured/h200-torch2.11-rnn-cudnn.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var d rnnCudnnFile
	if err := json.NewDecoder(z).Decode(&d); err != nil {
		t.Fatalf("h200-torch2.11-rnn-cudnn.json.gz: %v", err)
	}
	return d
}

// rnnGraph is the measured module as batchfit builds it: the input, h_0
// and c_0 (torch.zeros in nn.LSTM.forward), the flat weights in
// _flat_weights order, the one RNN op, and a loss to train.
func rnnGraph(r graph.RNNAttr, dt graph.DType) (*graph.Graph, error) {
	b := graph.NewBuilder("rnn")
	b.ParamDT = dt
	shape := graph.Shape{r.Seq, r.Batch, r.Input}
	if r.BatchFirst {
		shape = graph.Shape{r.Batch, r.Seq, r.Input}
	}
	x := b.Input("x", shape, dt)
	hx := b.Const("h_0", x, dt, r.StateShape()...)
	cx := graph.None
	if r.Mode == graph.LSTM {
		cx = b.Const("c_0", x, dt, r.CellShape()...)
	}
	gh, out := r.Mode.Gates()*r.Hidden, r.Out()
	var ws []graph.TensorID
	for l := int64(0); l < r.Layers; l++ {
		in := r.Input
		if l > 0 {
			in = r.Directions() * out
		}
		for d := int64(0); d < r.Directions(); d++ {
			sfx := fmt.Sprintf("_l%d", l)
			if d == 1 {
				sfx += "_reverse"
			}
			ws = append(ws,
				b.NamedParam("weight_ih"+sfx, graph.Shape{gh, in}, true),
				b.NamedParam("weight_hh"+sfx, graph.Shape{gh, out}, true),
				b.NamedParam("bias_ih"+sfx, graph.Shape{gh}, true),
				b.NamedParam("bias_hh"+sfx, graph.Shape{gh}, true))
			if r.Proj > 0 {
				ws = append(ws, b.NamedParam("weight_hr"+sfx, graph.Shape{r.Proj, r.Hidden}, true))
			}
		}
	}
	y, _, _ := b.RNN("rnn", x, hx, cx, ws, r)
	b.MSELoss("loss", y, b.Target("target", r.OutShape(), dt))
	return b.Graph()
}

// TestRNNCudnnReserve holds the cuDNN RNN rule to every row of the
// measured grid (testdata/measured/h200-torch2.11-rnn-cudnn.json.gz,
// validation/rnn_cudnn.py on an H200, PyTorch 2.11, cuDNN 9.19): the
// reserve's bytes (train.CudnnRNNReserveBytes) to the byte; the flat
// weights the node saves, views of one buffer of every weight's
// elements; what the simulator's RNN node saves beside the weights and
// the input (h_0, c_0, the output, the reserve) to the byte; and the
// memory the forward leaves allocated: h_0, c_0, the output, h_n, c_n and
// the reserve, each rounded to 512 bytes, exactly while every one of them
// is a small-pool block, and otherwise up to 1 MiB more for each one in
// the large pool, which may be handed a cached block whole
// (CUDACachingAllocator.cpp's should_split keeps a remainder of 1 MiB or
// less in the block; the grid ran its shapes one after another, each
// finding the previous one's cached segments).
func TestRNNCudnnReserve(t *testing.T) {
	d := loadRNNCudnn(t)
	if d.Environment.Cudnn != 91900 || len(d.Rows) != 389 {
		t.Fatalf("the grid is %d rows measured with cuDNN %d; the rule was read from 389 rows of cuDNN 9.19 (91900)", len(d.Rows), d.Environment.Cudnn)
	}
	prof, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	exact := 0
	for i := range d.Rows {
		row := &d.Rows[i]
		if row.Error != "" {
			t.Errorf("%v: the measurement failed: %s", row, row.Error)
			continue
		}
		r, err := row.attr()
		if err != nil {
			t.Fatalf("%v: %v", row, err)
		}
		dt, err := graph.ParseDType(row.DType)
		if err != nil {
			t.Fatalf("%v: %v", row, err)
		}
		e := dt.Size()
		var reserve, saved, params, flat int64
		reserves := 0
		for _, s := range row.Saved {
			switch {
			case s.DType == "uint8":
				reserves++
				reserve = s.StorageBytes
			case s.Param:
				// every weight is a view of one buffer, and the buffer
				// itself is saved too (weight_buf, result4)
				params++
				flat = s.StorageBytes
			}
			if !s.Param && !s.Input && !s.Dup {
				saved += s.StorageBytes
			}
		}
		if reserves != 1 {
			t.Errorf("%v: %d uint8 tensors saved, want the one reserve", row, reserves)
			continue
		}
		if got := train.CudnnRNNReserveBytes(&r, e); got != reserve {
			t.Errorf("%v: reserve %d bytes, cuDNN %d (%+d)", row, got, reserve, got-reserve)
		}
		// the node saves each flat weight (weight_stride0 per layer and
		// direction) and weight_buf
		if want := int64(r.WeightStride())*r.Layers*r.Directions() + 1; params != want {
			t.Errorf("%v: %d weights saved, the rule has %d and the buffer", row, params, want-1)
		}
		g, err := rnnGraph(r, dt)
		if err != nil {
			t.Fatalf("%v: %v", row, err)
		}
		if w := g.ParamCount() * e; w != flat {
			t.Errorf("%v: the weights hold %d bytes, the flat buffer %d", row, w, flat)
		}
		prec := train.FP32
		if dt == graph.F16 {
			prec = train.True16
		}
		_, sum, err := train.Simulate(g, train.Setup{Profile: prof, Precision: prec, Steps: 1, ComputeMajor: 9,
			Optimizer: train.Optimizer{Kind: train.SGD}})
		if err != nil {
			t.Fatalf("%v: %v", row, err)
		}
		var node int64
		for _, o := range sum.SavedByOp {
			if o.Kind == graph.RNN {
				node += o.Bytes
			}
		}
		if node != saved {
			t.Errorf("%v: the RNN node saves %d bytes beside its weights and input, PyTorch's %d (%+d)", row, node, saved, node-saved)
		}
		// what the forward leaves allocated
		states := []graph.Shape{r.StateShape(), r.StateShape()}
		if r.Mode == graph.LSTM {
			states = append(states, r.CellShape(), r.CellShape())
		}
		blocks := []int64{r.OutShape().Numel() * e, reserve}
		for _, s := range states {
			blocks = append(blocks, s.Numel()*e)
		}
		var want, large int64
		for _, n := range blocks {
			n = max(alloc.MinBlockSize, (n+alloc.MinBlockSize-1)/alloc.MinBlockSize*alloc.MinBlockSize)
			want += n
			if n > alloc.SmallSize {
				large++
			}
		}
		if row.OutputBytes != blocks[0] {
			t.Errorf("%v: output %d bytes, the rule %d", row, row.OutputBytes, blocks[0])
		}
		grew := row.AllocatedAfter - row.AllocatedBefore
		if grew == want {
			exact++
		} else if grew < want || grew > want+large*alloc.SmallSize {
			t.Errorf("%v: the forward left %d bytes allocated, the rule %d (%d large-pool blocks)", row, grew, want, large)
		}
	}
	t.Logf("%d rows: reserve and saved bytes to the byte; memory left by the forward exact in %d, the others within the large pool's unsplit remainders", len(d.Rows), exact)
}
