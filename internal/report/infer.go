package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/predict"
)

// GenerationJSON is the stable JSON form of a generation's figures.
type GenerationJSON struct {
	Prompt    int64  `json:"prompt"`
	NewTokens int64  `json:"new_tokens"`
	Beams     int64  `json:"beams"`
	Cache     string `json:"cache"`
	// Rows is batch × beams, the batch the model runs.
	Rows int64 `json:"rows"`
	// KVCacheBytes is the cache after the last forward; its positions are
	// KVCachePositions (the prompt and every new token but the last, or a
	// static cache's max_cache_len).
	KVCacheBytes        int64 `json:"kv_cache_bytes"`
	KVCachePositions    int64 `json:"kv_cache_positions"`
	KVCachePrefillBytes int64 `json:"kv_cache_prefill_bytes"`
	// KVCacheBytesPerToken is the cache's growth per generated token.
	KVCacheBytesPerToken int64 `json:"kv_cache_bytes_per_token"`
	// PeakAllocatedPerTokenBytes is how much the per-forward peak of
	// allocated memory grows per decode step (0 with fewer than three new
	// tokens).
	PeakAllocatedPerTokenBytes int64 `json:"peak_allocated_per_token_bytes"`
	PrefillPeakAllocatedBytes  int64 `json:"prefill_peak_allocated_bytes"`
	PrefillPeakReservedBytes   int64 `json:"prefill_peak_reserved_bytes"`
}

// generationFigures computes the generation's figures from the result.
func generationFigures(res *predict.Result) *GenerationJSON {
	in, gs := res.Infer, res.Generation
	if in == nil || gs == nil {
		return nil
	}
	gen := in.Generation(res.Config)
	out := &GenerationJSON{Prompt: gen.Prompt, NewTokens: gen.NewTokens, Beams: gen.Beams, Cache: "dynamic", Rows: gen.Rows(),
		KVCacheBytes: gs.CacheBytes, KVCachePositions: gen.CacheLen(), KVCachePrefillBytes: gs.PrefillCacheBytes}
	if gen.Static {
		out.Cache, out.KVCachePositions = "static", gen.MaxLen()
	}
	if n := gen.NewTokens - 1; n > 0 {
		out.KVCacheBytesPerToken = (gs.CacheBytes - gs.PrefillCacheBytes) / n
	}
	var steps []alloc.StepStats // one a forward (not the end of an autocast region after them)
	for _, st := range res.Timeline.Steps {
		if !st.Partial {
			steps = append(steps, st)
		}
	}
	if len(steps) > 0 {
		out.PrefillPeakAllocatedBytes, out.PrefillPeakReservedBytes = steps[0].PeakAllocated, steps[0].PeakReserved
	}
	// the decode steps are Steps[1:]: the growth of their peaks from the
	// first to the last, per step
	if n := len(steps) - 1; n >= 2 {
		out.PeakAllocatedPerTokenBytes = (steps[n].PeakAllocated - steps[1].PeakAllocated) / int64(n-1)
	}
	return out
}

// inferenceLine is SetupLine's middle for inference.
func inferenceLine(res *predict.Result) []string {
	in := res.Infer
	if in.Mode != predict.ModeGenerate {
		parts := []string{fmt.Sprintf("batch %d", res.Config.Batch)}
		if res.Config.Seq > 0 {
			parts = append(parts, fmt.Sprintf("seq %d", res.Config.Seq))
		}
		return append(parts, "eval under no_grad")
	}
	gen := in.Generation(res.Config)
	parts := []string{fmt.Sprintf("batch %d", gen.Batch), fmt.Sprintf("generate: prompt %d + %d new tokens", gen.Prompt, gen.NewTokens)}
	if gen.Beams > 1 {
		parts = append(parts, fmt.Sprintf("%d beams", gen.Beams))
	}
	if gen.Static {
		parts = append(parts, "static cache")
	} else {
		parts = append(parts, "dynamic cache")
	}
	return parts
}

// writeInference prints the static figures of an inference.
func writeInference(w io.Writer, res *predict.Result) {
	sum := res.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "parameters\t%s\t%s params\t\n", FormatBytes(sum.ParametersBytes), Commas(sum.ParamCount))
	fmt.Fprintf(tw, "batch data\t%s\t\t\n", FormatBytes(sum.BatchDataBytes))
	if sum.WorkspaceBytes > 0 {
		fmt.Fprintf(tw, "cuBLAS workspace\t%s\t\t\n", FormatBytes(sum.WorkspaceBytes))
	}
	if g := generationFigures(res); g != nil {
		fmt.Fprintf(tw, "KV cache at the end\t%s\t(%d positions × %d rows)\t\n", FormatBytes(g.KVCacheBytes), g.KVCachePositions, g.Rows)
		fmt.Fprintf(tw, "KV cache after the prefill\t%s\t\t\n", FormatBytes(g.KVCachePrefillBytes))
		if g.Cache == "dynamic" {
			fmt.Fprintf(tw, "KV cache per new token\t%s\t(a new, longer tensor per layer for keys and values each token)\t\n", FormatBytes(g.KVCacheBytesPerToken))
		}
		if g.NewTokens >= 3 {
			fmt.Fprintf(tw, "peak allocated per token\t%s\t(growth of a decode step's peak, per step)\t\n", FormatBytes(g.PeakAllocatedPerTokenBytes))
		}
		fmt.Fprintf(tw, "prefill peak allocated\t%s\t\t\n", FormatBytes(g.PrefillPeakAllocatedBytes))
		fmt.Fprintf(tw, "prefill peak reserved\t%s\t\t\n", FormatBytes(g.PrefillPeakReservedBytes))
	}
	tw.Flush()
	writeNotes(w, res)
}

// peakWhere says where an inference's peak was reached.
func peakWhere(res *predict.Result) string {
	at := res.PeakAt
	if res.Infer == nil || res.Infer.Mode != predict.ModeGenerate {
		return fmt.Sprintf("%s of step %d, at %s", at.Phase, at.Step+1, at.Site)
	}
	if at.Step == 0 {
		return fmt.Sprintf("the prefill, at %s", at.Site)
	}
	return fmt.Sprintf("decode step %d (new token %d), at %s", at.Step, at.Step+1, at.Site)
}
