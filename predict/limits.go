package predict

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// The bounds of one prediction's work. A simulation's time and memory grow
// with the ops of the graph (bounded by graph.MaxOps) times the forward
// passes it simulates: repeated micro-batches and steps are simulated once
// and replayed from the first (train's repeatMicro), but a pipeline's
// micro-batches are each simulated, and so is every decode step of a
// generation. Sizes are bounded by graph.MaxBytes.
const (
	// MaxLayers bounds a depth override (Config.Layers): twenty times the
	// deepest model of the zoo; the ops bound usually refuses first.
	MaxLayers = 4096
	// MaxSteps bounds the optimizer steps, and a schedule's length.
	MaxSteps = 1000
	// MaxAccumulate bounds the micro-batches of a step. Past the fifth
	// they repeat, so a long accumulation costs little...
	MaxAccumulate = 1 << 16
	// MaxPipelineMicroBatches ... except in a pipeline, whose 1F1B
	// schedule simulates every micro-batch of every stage (about 8 ms
	// each for Llama-3.2-1B).
	MaxPipelineMicroBatches = 1024
	// MaxNewTokens bounds a generation: each token is a decode step
	// simulated (8,192 tokens of Llama-3-8B take 3.5 s).
	MaxNewTokens = 1 << 15
)

// checkLimits refuses a request whose work is beyond the bounds above,
// naming the flag that sets each.
func checkLimits(r Request) error {
	switch {
	case r.Config.Layers > MaxLayers:
		return graph.Boundf("layers %d: at most %d", r.Config.Layers, MaxLayers)
	case r.Setup.Steps > MaxSteps:
		return fmt.Errorf("steps %d: at most %d", r.Setup.Steps, MaxSteps)
	case len(r.Schedule) > MaxSteps:
		return fmt.Errorf("a schedule of %d batch sizes: at most %d steps", len(r.Schedule), MaxSteps)
	case r.Setup.Accumulate > MaxAccumulate:
		return fmt.Errorf("accumulate %d: at most %d micro-batches a step", r.Setup.Accumulate, MaxAccumulate)
	case r.Config.PP > 1 && r.Setup.Accumulate > MaxPipelineMicroBatches:
		return fmt.Errorf("accumulate %d: a pipeline simulates every micro-batch, at most %d", r.Setup.Accumulate, MaxPipelineMicroBatches)
	case r.Config.PP > MaxLayers:
		return fmt.Errorf("pp %d: at most %d stages", r.Config.PP, MaxLayers)
	case r.Infer != nil && r.Infer.NewTokens > MaxNewTokens:
		return fmt.Errorf("new tokens %d: at most %d (each is a decode step simulated)", r.Infer.NewTokens, MaxNewTokens)
	}
	if r.Infer != nil && r.Infer.Mode == ModeGenerate {
		// the rows and the cache's length are sizes: checked as such
		if _, ok := graph.MulSize(r.Config.Batch, max(r.Infer.Beams, 1)); !ok {
			return fmt.Errorf("batch %d × beams %d overflows", r.Config.Batch, r.Infer.Beams)
		}
		if _, ok := graph.AddSize(r.Config.Seq, r.Infer.NewTokens); !ok {
			return fmt.Errorf("prompt %d + new tokens %d overflows", r.Config.Seq, r.Infer.NewTokens)
		}
	}
	return nil
}
