package validation

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// generateReference is validation/generate.py's output.
type generateReference struct {
	Torch  string                  `json:"torch"`
	Vocab  int64                   `json:"vocab"`
	Embed  int64                   `json:"embed"`
	Layers int                     `json:"layers"`
	Cases  map[string]generateCase `json:"cases"`
}

type generateCase struct {
	Batch      int64 `json:"batch"`
	Prompt     int64 `json:"prompt"`
	NewTokens  int64 `json:"new_tokens"`
	ParamBytes int64 `json:"param_bytes"`
	Forwards   []struct {
		Peak  int64   `json:"peak"`
		End   int64   `json:"end"`
		Cache []int64 `json:"cache"`
	} `json:"forwards"`
}

// toyDecoder is generate.py's model as a graph, op for op: the forward of
// L new tokens for B rows with past positions in the cache.
func toyDecoder(ref *generateReference, batch, l, past int64) (*graph.Graph, error) {
	b := graph.NewBuilder("toy-decoder")
	V, E := ref.Vocab, ref.Embed
	ids := b.Input("ids", graph.Shape{batch, l}, graph.I64)
	emb := b.Param("embed.weight", graph.Shape{V, E})
	x := b.EmbeddingWith("embed", ids, emb)
	for i := 0; i < ref.Layers; i++ {
		b.Scope(fmt.Sprintf("layers.%d", i), func() {
			q := b.Reshape("q_unsqueeze", b.Linear("q", x, E, true), batch, 1, l, E)
			k := b.Reshape("k_unsqueeze", b.Linear("k", x, E, true), batch, 1, l, E)
			v := b.Reshape("v_unsqueeze", b.Linear("v", x, E, true), batch, 1, l, E)
			k = b.KVCache("cache", k, 2*i, past+l, false, false)
			v = b.KVCache("cache", v, 2*i+1, past+l, false, false)
			s := b.MatMul("scores", q, b.Transpose("key_transpose", k, 2, 3))
			p := b.Softmax("softmax", s, -1, false)
			a := b.Reshape("squeeze", b.MatMul("attend", p, v), batch, l, E)
			x = b.Add("residual", x, b.Linear("o", a, E, true))
		})
	}
	logits := b.Linear("head", x, V, true)
	b.Output(b.CastCopy("next_token_logits", b.Select("last", logits, 1), graph.F32))
	return b.Graph()
}

// The simulator on generate.py's toy decoder against real PyTorch: per
// forward, the peak and the end of the bytes alive (requested bytes, as
// c10's CPU allocator reports them), and the events of the cache updates
// — the new, longer tensor, the old one freed, then key_states.
func TestGenerateAgainstTorchCPU(t *testing.T) {
	forEachRelease(t, func(t *testing.T, r torchRelease) {
		data, err := os.ReadFile(r.file("torch-cpu-generate.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ref generateReference
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("torch-cpu-generate.json: %v", err)
		}
		if len(ref.Cases) == 0 {
			t.Fatal("torch-cpu-generate.json has no cases")
		}
		prof, err := r.profile(ref.Torch)
		if err != nil {
			t.Fatal(err)
		}
		for id, c := range ref.Cases {
			t.Run(id, func(t *testing.T) {
				prefill, err := toyDecoder(&ref, c.Batch, c.Prompt, 0)
				if err != nil {
					t.Fatal(err)
				}
				step := func(past int64) (*graph.Graph, error) { return toyDecoder(&ref, c.Batch, 1, past) }
				sim, _, err := train.Generate(prefill, step, train.Setup{CPU: true, Profile: prof}, train.Generation{Prompt: c.Prompt, NewTokens: c.NewTokens, Batch: c.Batch, Beams: 1})
				if err != nil {
					t.Fatal(err)
				}
				tr := sim.Trace()
				got, _ := forwardFigures(tr, func(site string) bool { return strings.HasSuffix(site, ".cache") })
				if len(got) != len(c.Forwards) {
					t.Fatalf("%d forwards simulated, %d measured", len(got), len(c.Forwards))
				}
				for k, want := range c.Forwards {
					g := got[k]
					if g.peak != want.Peak || g.end != want.End || !slices.Equal(g.cache, want.Cache) {
						t.Errorf("forward %d: peak %d, end %d, cache events %v; PyTorch %d, %d, %v", k, g.peak, g.end, g.cache, want.Peak, want.End, want.Cache)
					}
				}
			})
		}
	})
}

// forwardFigure is one forward of an inference trace, as the CPU
// references record it: the most bytes requested and alive during it
// (from what was alive when it began), the bytes alive at its end, and the
// allocations (positive) and frees (negative) of the sites listed.
type forwardFigure struct {
	peak, end int64
	cache     []int64
}

// forwardFigures splits an inference trace at its step ends into its
// forwards; listed picks the sites whose events forwardFigure.cache lists
// (nil: none). It also returns the bytes alive after the last event.
func forwardFigures(tr *trace.Trace, listed func(site string) bool) ([]forwardFigure, int64) {
	var got []forwardFigure
	live, cur := int64(0), forwardFigure{}
	size := map[int64]int64{}
	for _, e := range tr.Events {
		switch e.Action {
		case trace.Alloc:
			size[e.ID] = e.Size
			live += e.Size
			cur.peak = max(cur.peak, live)
		case trace.Free:
			live -= size[e.ID]
		case trace.StepEnd:
			cur.end = live
			got = append(got, cur)
			cur = forwardFigure{peak: live}
			continue
		}
		if e.Phase == trace.Setup {
			cur.peak = live // the parameters, before the first forward
			continue
		}
		if listed != nil && listed(tr.SiteName(e.Site)) {
			d := size[e.ID]
			if e.Action == trace.Free {
				d = -d
			}
			cur.cache = append(cur.cache, d)
		}
	}
	return got, live
}
