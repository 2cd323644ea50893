package predict

import (
	"context"
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// Mode is what a prediction runs: a training step, or inference.
type Mode string

const (
	ModeTrain    Mode = "train"
	ModeEval     Mode = "eval"
	ModeGenerate Mode = "generate"
)

// ParseMode reads --mode.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeTrain, ModeEval, ModeGenerate:
		return Mode(s), nil
	case "":
		return ModeTrain, nil
	}
	return "", fmt.Errorf("unknown mode %q (want train, eval or generate)", s)
}

// Inference describes an inference job. Eval runs the model's forward
// pass (and loss) under torch.no_grad() with the model in eval mode, Setup.Steps
// batches in a row. Generate runs transformers' generate() on prompts of
// Config.Seq tokens, Config.Batch of them.
type Inference struct {
	Mode Mode
	// NewTokens is max_new_tokens (generate).
	NewTokens int64
	// Beams is num_beams (generate; 0 or 1: no beam search).
	Beams int64
	// Static is cache_implementation="static" (generate).
	Static bool
}

// Generation is the train.Generation of a request.
func (in *Inference) Generation(c models.Config) train.Generation {
	return train.Generation{Prompt: c.Seq, NewTokens: in.NewTokens, Batch: c.Batch, Beams: max(in.Beams, 1), Static: in.Static}
}

func simulateInference(ctx context.Context, r Request, setup train.Setup) (*train.Simulator, *graph.Graph, *train.GenerationSummary, error) {
	switch r.Infer.Mode {
	case ModeEval:
		g, err := r.Source.Build(r.Config)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := checkAttention(r, setup, g); err != nil {
			return nil, nil, nil, err
		}
		sim, err := train.NewInference(g, setup)
		if err != nil {
			return nil, nil, nil, err
		}
		for i := 0; i < setup.Steps; i++ {
			if err := ctx.Err(); err != nil {
				return nil, nil, nil, err
			}
			if err := sim.Forward(g); err != nil {
				return nil, nil, nil, err
			}
		}
		// a region around the loop (Setup.Autocast.AroundLoop) ends here
		if err := sim.EndAutocast(); err != nil {
			return nil, nil, nil, err
		}
		return sim, g, nil, nil
	case ModeGenerate:
		noCache := fmt.Errorf("generate: %s has no key/value cache: generation is modelled for Hugging Face decoders (llama, mistral, qwen2, gemma, phi3)", r.Source.Name())
		if r.Source.DefaultSeq() == 0 && r.Config.Seq <= 0 {
			return nil, nil, nil, noCache // no sequence: an image model
		}
		gen := r.Infer.Generation(r.Config)
		if err := gen.Check(); err != nil {
			return nil, nil, nil, err
		}
		dec := models.Decode{LogSoftmax: gen.Beams > 1}
		if gen.Static {
			dec.StaticLen = gen.MaxLen()
		}
		c := r.Config
		c.Batch = gen.Rows()
		c.Decode = &dec
		prefill, err := r.Source.Build(c)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("generate: %w", err)
		}
		if !slices.ContainsFunc(prefill.Ops, func(op graph.Op) bool { return op.Kind == graph.KVCache }) {
			return nil, nil, nil, noCache
		}
		if err := checkAttention(r, setup, prefill); err != nil {
			return nil, nil, nil, err
		}
		steps := &decodeGraphs{ctx: ctx, src: r.Source, c: c, first: gen.Prompt}
		sim, gs, err := train.Generate(prefill, steps.at, setup, gen)
		if err != nil {
			return nil, nil, nil, err
		}
		return sim, prefill, &gs, nil
	}
	return nil, nil, nil, fmt.Errorf("mode %q is not inference", r.Infer.Mode)
}

// decodeGraphs gives the graph of the decode step that finds past
// positions in the cache. The steps differ only in the cache length, and
// every size that depends on it (the cache, the scores, a mask) is affine
// in it: the graphs for the first two lengths are built, and the first is
// reused with those sizes set for each later step. Building thousands of
// graphs would cost more than simulating them. A static cache's steps are
// all one graph.
type decodeGraphs struct {
	// ctx is checked at every decode step: a generation of thousands of
	// tokens is the longest loop of an inference prediction.
	ctx   context.Context
	src   Source
	c     models.Config
	first int64 // past of the first decode step
	g     *graph.Graph
	base  []graph.Shape // the first graph's shapes
	slope []graph.Shape // per tensor: change of each dim per position, nil when none
}

func (d *decodeGraphs) build(past int64) (*graph.Graph, error) {
	c := d.c
	c.Seq = 1
	dec := *c.Decode
	dec.Past = past
	c.Decode = &dec
	return d.src.Build(c)
}

func (d *decodeGraphs) at(past int64) (*graph.Graph, error) {
	if d.ctx != nil {
		if err := d.ctx.Err(); err != nil {
			return nil, err
		}
	}
	if d.g == nil {
		g, err := d.build(d.first)
		if err != nil {
			return nil, err
		}
		d.g = g
		if d.c.Decode.StaticLen > 0 {
			return g, nil
		}
		g2, err := d.build(d.first + 1)
		if err != nil {
			return nil, err
		}
		if err := d.learn(g, g2); err != nil {
			return nil, err
		}
	}
	if d.slope == nil {
		return d.g, nil
	}
	k := past - d.first
	for i := range d.g.Tensors {
		sl := d.slope[i]
		if sl == nil {
			continue
		}
		s := d.g.Tensors[i].Shape
		for j := range s {
			s[j] = d.base[i][j] + sl[j]*k
		}
	}
	return d.g, nil
}

// learn finds the sizes that grow with the cache from the graphs of two
// consecutive lengths, which must have the same tensors and ops.
func (d *decodeGraphs) learn(g, g2 *graph.Graph) error {
	if len(g.Tensors) != len(g2.Tensors) || len(g.Ops) != len(g2.Ops) {
		return fmt.Errorf("generate: the decode graphs of %s change structure with the cache length", g.Name)
	}
	d.base = make([]graph.Shape, len(g.Tensors))
	d.slope = make([]graph.Shape, len(g.Tensors))
	for i := range g.Tensors {
		a, b := g.Tensors[i].Shape, g2.Tensors[i].Shape
		if len(a) != len(b) || g.Tensors[i].Name != g2.Tensors[i].Name {
			return fmt.Errorf("generate: the decode graphs of %s change structure with the cache length", g.Name)
		}
		d.base[i] = a.Clone()
		var sl graph.Shape
		for j := range a {
			if a[j] != b[j] {
				if sl == nil {
					sl = make(graph.Shape, len(a))
				}
				sl[j] = b[j] - a[j]
			}
		}
		d.slope[i] = sl
	}
	for i := range g.Ops {
		if g.Ops[i].Kind != g2.Ops[i].Kind || g.Ops[i].Name != g2.Ops[i].Name {
			return fmt.Errorf("generate: the decode graphs of %s change structure with the cache length", g.Name)
		}
	}
	return nil
}
