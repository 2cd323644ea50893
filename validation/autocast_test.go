package validation

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// autocastReference is validation/autocast.py's output.
type autocastReference struct {
	Torch    string                  `json:"torch"`
	Forwards int                     `json:"forwards"`
	Batch    int64                   `json:"batch"`
	MLP      []int64                 `json:"mlp"`
	Block    []int64                 `json:"block"`
	Conv     []int64                 `json:"conv"`
	Cases    map[string]autocastCase `json:"cases"`
}

type autocastCase struct {
	Model        string `json:"model"`
	Mode         string `json:"mode"`
	Region       string `json:"region"`
	CacheEnabled bool   `json:"cache_enabled"`
	ParamBytes   int64  `json:"param_bytes"`
	BufferBytes  int64  `json:"buffer_bytes"`
	Forwards     []struct {
		Peak int64 `json:"peak"`
		End  int64 `json:"end"`
	} `json:"forwards"`
	Exit int64 `json:"exit"`
}

// autocastModel is autocast.py's model as a graph, op for op; its output
// is what the loop's out holds.
func autocastModel(ref *autocastReference, name string) (*graph.Graph, error) {
	b := graph.NewBuilder("autocast-" + name)
	B := ref.Batch
	var out graph.TensorID
	switch name {
	case "mlp":
		in, h, o := ref.MLP[0], ref.MLP[1], ref.MLP[2]
		x := b.Input("x", graph.Shape{B, in}, graph.F32)
		x = b.Act(graph.ReLU, "1", b.Linear("0", x, h, true), false)
		x = b.Act(graph.ReLU, "3", b.Linear("2", x, h, true), false)
		out = b.Linear("4", x, o, true)
	case "block":
		T, E, F, O := ref.Block[0], ref.Block[1], ref.Block[2], ref.Block[3]
		x := b.Input("x", graph.Shape{B, T, E}, graph.F32)
		h := b.LayerNorm("ln1", x, 1, true)
		q, k, v := b.Linear("q", h, E, true), b.Linear("k", h, E, true), b.Linear("v", h, E, true)
		s := b.MatMul("scores", q, b.Transpose("key_t", k, 1, 2))
		p := b.Softmax("softmax", s, -1, false)
		a := b.MatMul("attend", p, v)
		x = b.Add("residual1", x, b.Linear("o", a, E, true))
		h = b.LayerNorm("ln2", x, 1, true)
		h = b.Linear("fc2", b.Act(graph.ReLU, "relu", b.Linear("fc1", h, F, true), false), E, true)
		x = b.Add("residual2", x, h)
		out = b.Linear("head", x, O, true)
	case "conv":
		S, C, C2, O := ref.Conv[0], ref.Conv[1], ref.Conv[2], ref.Conv[3]
		x := b.Input("x", graph.Shape{B, 3, S, S}, graph.F32)
		conv := graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 1, Bias: true}
		x = b.Act(graph.ReLU, "relu1", b.Conv2d("c1", x, C, conv), false)
		x = b.MaxPool2d("pool", x, graph.Pool2dOpts{Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}, Dilation: [2]int64{1, 1}})
		x = b.Act(graph.ReLU, "relu2", b.Conv2d("c2", x, C2, conv), false)
		out = b.Linear("fc", b.Flatten("flatten", x, 1), O, true)
	default:
		return nil, fmt.Errorf("unknown model %q", name)
	}
	b.Output(out)
	return b.Graph()
}

// The eval simulator under bfloat16 autocast against real PyTorch on the
// CPU (autocast.py): per forward the peak and end of the bytes alive, and
// what is alive once the autocast region of a loop has ended, for the
// cache on and off (torch.autocast's cache_enabled), under no_grad and
// inference_mode, with autocast around each forward or around the loop.
func TestAutocastEvalAgainstTorchCPU(t *testing.T) {
	forEachRelease(t, func(t *testing.T, r torchRelease) {
		data, err := os.ReadFile(r.file("torch-cpu-autocast.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ref autocastReference
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("torch-cpu-autocast.json: %v", err)
		}
		if len(ref.Cases) == 0 || ref.Forwards < 2 {
			t.Fatal("torch-cpu-autocast.json has no cases")
		}
		prof, err := r.profile(ref.Torch)
		if err != nil {
			t.Fatal(err)
		}
		for id, c := range ref.Cases {
			t.Run(id, func(t *testing.T) {
				g, err := autocastModel(&ref, c.Model)
				if err != nil {
					t.Fatal(err)
				}
				s := train.Setup{CPU: true, Profile: prof, Precision: train.MixedBF16,
					Autocast: train.Autocast{CacheOff: !c.CacheEnabled, InferenceMode: c.Mode == "inference_mode", AroundLoop: c.Region == "loop"}}
				sim, err := train.NewInference(g, s)
				if err != nil {
					t.Fatal(err)
				}
				for k := 0; k < ref.Forwards; k++ {
					if err := sim.Forward(g); err != nil {
						t.Fatal(err)
					}
				}
				if err := sim.EndAutocast(); err != nil {
					t.Fatal(err)
				}
				tr := sim.Trace()
				got, live := forwardFigures(tr, nil)
				if len(got) != len(c.Forwards) {
					t.Fatalf("%d forwards simulated, %d measured", len(got), len(c.Forwards))
				}
				for k, want := range c.Forwards {
					if g := got[k]; g.peak != want.Peak || g.end != want.End {
						t.Errorf("forward %d: peak %d, end %d; PyTorch %d, %d", k, g.peak, g.end, want.Peak, want.End)
					}
				}
				if live != c.Exit {
					t.Errorf("after the autocast region: %d alive; PyTorch %d", live, c.Exit)
				}
			})
		}
	})
}
