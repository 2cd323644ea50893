package cli

import (
	"encoding/json"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// --transformers reaches the graph: Llama-3.2-1B (vocabulary V = 128,256)
// in bf16 at batch 2 and 64 tokens, one layer, with LoRA, so that the
// logits dominate the peak, which lies in cross-entropy's backward: the
// saved log-probabilities, their gradient and the gradient of the logits,
// three float32 tensors of R rows, beside the logits --keep-output holds.
//
//	4.39: the held logits are the float32 copy, [2, 64, V]·4 B =
//	65,667,072 B; the shifted loss has R = 2·63 rows.
//	current: the held logits are lm_head's bf16 ones, 32,833,536 B; the
//	loss reads all R = 2·64 rows.
//
// So 4.39's peak is above the current release's by 65,667,072 −
// 32,833,536 − 3·(2 rows · V · 4 B = 1,026,048) = 29,755,392 B at least.
// Without --keep-output the returned logits go at their last use.
func TestTransformersFlag(t *testing.T) {
	t.Parallel()
	peak := func(extra ...string) int64 {
		args := append([]string{"estimate", "Llama-3.2-1B", "--batch", "2", "--seq", "64", "--layers", "1", "--precision", "bf16-true",
			"--lora", "4", "--lora-targets", "q_proj,v_proj", "--json"}, extra...)
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		var e report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatal(err)
		}
		return e.PeakAllocatedBytes
	}
	cur, old := peak("--keep-output"), peak("--keep-output", "--transformers", "4.39")
	if old-cur < 29_755_392 {
		t.Errorf("peak allocated with the output held: %d (4.39), %d (current); want 4.39 above by at least 29,755,392 B", old, cur)
	}
	if base, held := peak(), cur; held <= base {
		t.Errorf("peak allocated %d with the current release's bf16 logits held, %d without; want it above", held, base)
	}
}
