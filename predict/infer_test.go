package predict

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// toyLlama is a small llama-style decoder: 2 layers, 4 query heads of 8
// channels, 2 key/value heads (grouped-query attention).
func toyLlama(version string) Source {
	tc := models.TransformerConfig{Arch: "llama", VocabSize: 64, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Intermediate: 64, Activation: "silu", NormEps: 1e-5, Version: version}
	return Zoo{M: models.Model{Name: "toy-llama", Family: "transformers", DefaultSeq: 16, Dims: []models.Dim{models.DimSeq},
		Build: func(c models.Config) (*graph.Graph, error) { return models.BuildTransformer("toy-llama", tc, c) }}}
}

func generate(t *testing.T, src Source, prec train.Precision, batch, prompt, tokens, beams int64, static bool) *Result {
	t.Helper()
	g, err := gpu.Lookup("80GB")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Request{Source: src, Config: models.Config{Batch: batch, Seq: prompt}, GPU: g, Context: 0, KeepTrace: true,
		Setup: train.Setup{Precision: prec}, Infer: &Inference{Mode: ModeGenerate, NewTokens: tokens, Beams: beams, Static: static}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Trace.Validate(); err != nil {
		t.Fatal(err)
	}
	return res
}

// The cache against the published formula, 2 × layers × kv_heads ×
// head_dim × positions × rows × bytes, for the toy (2 layers, 2 kv heads
// of 8): 2·2·2·8 = 64 elements a position and a row.
func TestGenerationCacheFormula(t *testing.T) {
	cases := []struct {
		name                  string
		prec                  train.Precision
		batch, prompt, tokens int64
		beams                 int64
		static                bool
		prefill, end          int64
	}{
		// dynamic: the prompt after the prefill, prompt + tokens - 1 at the end
		{"dynamic fp32", train.FP32, 3, 5, 4, 1, false, 64 * 5 * 3 * 4, 64 * 8 * 3 * 4},      // 3840, 6144
		{"dynamic bf16", train.TrueBF16, 3, 5, 4, 1, false, 64 * 5 * 3 * 2, 64 * 8 * 3 * 2},  // 1920, 3072
		{"dynamic one token", train.FP32, 2, 7, 1, 1, false, 64 * 7 * 2 * 4, 64 * 7 * 2 * 4}, // 3584: no decode step
		{"dynamic 2 beams", train.FP32, 3, 5, 4, 2, false, 64 * 5 * 6 * 4, 64 * 8 * 6 * 4},   // rows = 3·2
		// past the sixth decode step the steps are extrapolated
		{"dynamic 40 tokens", train.FP32, 2, 5, 40, 1, false, 64 * 5 * 2 * 4, 64 * 44 * 2 * 4},
		{"dynamic 40 tokens 3 beams bf16", train.TrueBF16, 1, 3, 40, 3, false, 64 * 3 * 3 * 2, 64 * 42 * 3 * 2},
		{"static fp32", train.FP32, 3, 5, 4, 1, true, 64 * 9 * 3 * 4, 64 * 9 * 3 * 4},                 // max_length 9 from the start
		{"static bf16 2 beams", train.TrueBF16, 1, 16, 16, 2, true, 64 * 32 * 2 * 2, 64 * 32 * 2 * 2}, // 8192
		// under autocast the parameters stay float32: a static cache is in
		// the model's dtype; a dynamic one is made from key_states and
		// value_states, and the keys are float32 (LlamaRotaryEmbedding
		// returns cos and sin in the embeddings' dtype, float32, and
		// q * cos promotes the bfloat16 projection), the values bfloat16:
		// 2·2·8 elements × (4 + 2) bytes = 192 bytes a position and a row
		{"static bf16-mixed", train.MixedBF16, 1, 4, 4, 1, true, 64 * 8 * 4, 64 * 8 * 4},
		{"dynamic bf16-mixed", train.MixedBF16, 1, 4, 4, 1, false, 2 * 2 * 8 * 4 * (4 + 2), 2 * 2 * 8 * 7 * (4 + 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := generate(t, toyLlama(""), c.prec, c.batch, c.prompt, c.tokens, c.beams, c.static)
			gs := res.Generation
			if gs.PrefillCacheBytes != c.prefill || gs.CacheBytes != c.end {
				t.Errorf("cache after the prefill %d, at the end %d; want %d and %d", gs.PrefillCacheBytes, gs.CacheBytes, c.prefill, c.end)
			}
			if gs.CacheTensors != 4 {
				t.Errorf("%d cache tensors, want 4 (keys and values of 2 layers)", gs.CacheTensors)
			}
		})
	}
}

// cacheEvents lists the key/value cache's events with their sizes.
type cacheEvent struct {
	trace.Event
	size int64 // of the block, for frees too
}

func cacheEvents(tr *trace.Trace) []cacheEvent {
	sizes := map[int64]int64{}
	var out []cacheEvent
	for _, e := range tr.Events {
		switch e.Action {
		case trace.Alloc:
			sizes[e.ID] = e.Size
		case trace.Free:
			e.Size = sizes[e.ID]
		}
		if e.Category == trace.KVCache && (e.Action == trace.Alloc || e.Action == trace.Free) {
			out = append(out, cacheEvent{e, e.Size})
		}
	}
	return out
}

// DynamicCache.update is torch.cat: every decode step allocates for each
// layer a new keys tensor one position longer and then frees the old one,
// then the same for the values. Batch 2, prompt 3, 4 new tokens, fp32: a
// position of one layer's keys for 2 rows is 2·2·8·4 = 128 bytes.
func TestDynamicCacheGrowsByCat(t *testing.T) {
	res := generate(t, toyLlama(""), train.FP32, 2, 3, 4, 1, false)
	const pos = 2 * 2 * 8 * 4
	ev := cacheEvents(res.Trace)
	byStep := map[int32][]cacheEvent{}
	for _, e := range ev {
		byStep[e.Step] = append(byStep[e.Step], e)
	}
	// the prefill: cat onto the empty tensor of lazy_initialization, a
	// copy of key_states per tensor, nothing to free
	var want []int64
	for range 4 {
		want = append(want, 3*pos)
	}
	if got := sizes(byStep[0], trace.Alloc); !slices.Equal(got, want) || len(sizes(byStep[0], trace.Free)) != 0 {
		t.Errorf("prefill: allocs %v, frees %v; want allocs %v and no frees", got, sizes(byStep[0], trace.Free), want)
	}
	for k := int32(1); k <= 3; k++ { // decode steps: past = 3 + k - 1
		past := int64(3 + k - 1)
		var got, wantSeq []string
		for _, e := range byStep[k] {
			got = append(got, e.Action.String()+" "+itoa(e.size))
		}
		for range 4 { // keys of layer 0, values of layer 0, keys of layer 1, values of layer 1
			wantSeq = append(wantSeq, "alloc "+itoa((past+1)*pos), "free "+itoa(past*pos))
		}
		if !slices.Equal(got, wantSeq) {
			t.Errorf("decode step %d: %v, want %v", k, got, wantSeq)
		}
	}
}

func sizes(ev []cacheEvent, a trace.Action) []int64 {
	var out []int64
	for _, e := range ev {
		if e.Action == a {
			out = append(out, e.size)
		}
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Before the cache layers of transformers 4.54, DynamicCache.update
// appended the prefill's key_states to its list: no copy, and the first
// decode step frees those (activation) tensors after its cat.
func TestDynamicCacheKeepsFirstStates(t *testing.T) {
	res := generate(t, toyLlama("4.53"), train.FP32, 2, 3, 2, 1, false)
	const pos = 2 * 2 * 8 * 4
	for _, e := range cacheEvents(res.Trace) {
		if e.Step == 0 {
			t.Fatalf("prefill made a cache tensor (%s of %d bytes): the cache should keep key_states", e.Action, e.size)
		}
	}
	if g := res.Generation; g.PrefillCacheBytes != 4*3*pos || g.CacheBytes != 4*4*pos {
		t.Errorf("cache %d after the prefill, %d at the end; want %d and %d", g.PrefillCacheBytes, g.CacheBytes, 4*3*pos, 4*4*pos)
	}
}

// StaticCache preallocates (rows, kv_heads, max_cache_len, head_dim) for
// keys and values of each layer before the prefill, writes in place, and
// frees nothing while generating. Batch 2 × 2 beams, prompt 3, 3 new
// tokens: max_cache_len 6, 4·2·6·8·4 = 1536 bytes a tensor.
func TestStaticCachePreallocates(t *testing.T) {
	res := generate(t, toyLlama(""), train.FP32, 2, 3, 3, 2, true)
	var setup, later []cacheEvent
	for _, e := range cacheEvents(res.Trace) {
		if e.Phase == trace.Setup {
			setup = append(setup, e)
		} else {
			later = append(later, e)
		}
	}
	if got := sizes(setup, trace.Alloc); !slices.Equal(got, []int64{1536, 1536, 1536, 1536}) {
		t.Errorf("preallocated %v, want 4 tensors of 1536 bytes", got)
	}
	// beam search reorders the cache after each forward (3 of them, the
	// prefill's too): index_select makes a new tensor per cache tensor,
	// the old one goes
	var want []string
	for range 3 {
		for range 4 {
			want = append(want, "alloc 1536", "free 1536")
		}
	}
	var got []string
	for _, e := range later {
		got = append(got, e.Action.String()+" "+itoa(e.size))
	}
	if !slices.Equal(got, want) {
		t.Errorf("after the preallocation: %v, want %v", got, want)
	}
}

// The decode graphs reused with their sizes set per cache length are the
// graphs the builder makes for those lengths.
func TestDecodeGraphsMatchBuilt(t *testing.T) {
	for _, version := range []string{"", "4.44"} {
		src := toyLlama(version)
		for _, eager := range []bool{false, true} {
			src := src
			if eager {
				tc := models.TransformerConfig{Arch: "llama", VocabSize: 64, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
					Intermediate: 64, Activation: "silu", Version: version, AttnImpl: "eager"}
				src = Zoo{M: models.Model{Name: "toy-eager", Build: func(c models.Config) (*graph.Graph, error) {
					return models.BuildTransformer("toy-eager", tc, c)
				}}}
			}
			c := models.Config{Batch: 3, Decode: &models.Decode{}}
			d := &decodeGraphs{src: src, c: c, first: 5}
			for _, past := range []int64{5, 6, 9, 100, 7} {
				g, err := d.at(past)
				if err != nil {
					t.Fatal(err)
				}
				want, err := d.build(past)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want.Tensors {
					if !slices.Equal(g.Tensors[i].Shape, want.Tensors[i].Shape) {
						t.Errorf("version %q eager %v past %d: %s is %v, built %v", version, eager, past, want.Tensors[i].Name, g.Tensors[i].Shape, want.Tensors[i].Shape)
					}
				}
			}
		}
	}
}

func TestGenerateRefusals(t *testing.T) {
	g, _ := gpu.Lookup("80GB")
	mlp, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	gpt2, err := models.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		src  Source
		in   Inference
		want string
	}{
		{"no cache", Zoo{M: mlp}, Inference{Mode: ModeGenerate, NewTokens: 4}, "has no key/value cache"},
		{"not llama-style", Zoo{M: gpt2}, Inference{Mode: ModeGenerate, NewTokens: 4}, "generation is modelled for the llama-style decoders"},
		{"no tokens", toyLlama(""), Inference{Mode: ModeGenerate}, "at least one new token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			_, err := Run(context.Background(), Request{Source: c.src, Config: models.Config{Batch: 1, Seq: 8}, GPU: g, Context: 0, Infer: &in})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// With autocast around generate() the weight-cast cache is made in the
// prefill and kept to the end: the toy's 2 × 7 Linear weights and the LM
// head (the embedding and the norms are not on the lower-precision list)
// are cast once, each to half its float32 size, and freed after the last
// forward.
func TestGenerateKeepsAutocastCopies(t *testing.T) {
	res := generate(t, toyLlama(""), train.MixedBF16, 1, 4, 3, 1, false)
	// q 32·32, k and v 32·16, o 32·32, gate and up 32·64, down 64·32; head 32·64
	want := map[int64]int{32 * 32 * 2: 4, 32 * 16 * 2: 4, 32 * 64 * 2: 7}
	got := map[int64]int{}
	lastEnd, freedAfter := -1, 0
	for i, e := range res.Trace.Events {
		switch {
		case e.Action == trace.StepEnd:
			lastEnd = i
		case e.Category == trace.CastCache && e.Action == trace.Alloc:
			if e.Step != 0 {
				t.Errorf("a weight copy made in forward %d, want all in the prefill", e.Step)
			}
			got[e.Size]++
		}
	}
	for _, e := range res.Trace.Events[lastEnd+1:] {
		if e.Category == trace.CastCache && e.Action == trace.Free {
			freedAfter++
		}
	}
	if !maps.Equal(got, want) || freedAfter != 15 {
		t.Errorf("copies by size %v (want %v), %d freed after the last forward (want 15)", got, want, freedAfter)
	}
}
