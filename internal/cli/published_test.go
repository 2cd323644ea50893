package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// Figures the peers publish in their own documentation (docs/accuracy.md
// §10 gives each source, its settings and every row, also those outside the
// bound). The expected values are the published ones, converted to bytes
// as the source prints them: LitGPT prints torch.cuda.max_memory_allocated()
// divided by 1e9 as "GB"; torchtune's README prints GiB.
//
// Only rows whose source states every setting that changes the figure are
// here, and only those measured at fixed shapes: LitGPT's finetune/lora.py
// runs its first iteration on the longest Alpaca sample, so the peak is at
// that length; the config_hub rows are truncated at max_seq_length 512;
// torchtune's packed row packs every sample to 4096 tokens. Rows whose
// settings leave the length open, or that depend on a rule batchfit does not
// model, are in §10 with their explanation and are not tested.
//
// The bound is 3 % of the published figure either way, row by row. §3
// plans, for batchfit's own GPU measurements, a median |error| of peak
// allocated ≤ 2 % with no case under-predicted by more than 5 %; these rows
// are others' runs, whose settings are read from their scripts and whose
// figures are rounded to 0.01 GB (≤ 0.25 % of the smallest here), so each
// row gets a per-row bound between those two. Every row below meets it; the
// rows that do not are in §10 with their explanation.
const publishedBound = 0.03

const (
	gb  = 1e9
	gib = 1 << 30
)

func TestPublishedFigures(t *testing.T) {
	t.Parallel()
	const (
		stablelm  = "../../testdata/published/stabilityai--stablelm-base-alpha-3b.json"
		llama32_3 = "../../testdata/published/meta-llama--Llama-3.2-3B.untied.json"
		llama32_1 = "../../testdata/published/meta-llama--Llama-3.2-1B.untied.json"
		// LitGPT finetune/lora.py at 8641822: r 8, alpha 16, dropout 0.05
		// on query and value, AdamW with weight decay 0.01, --precision
		// bf16-true, A100-SXM4-40GB.
		litLoRA = "--precision bf16-true --optimizer adamw --weight-decay 0.01 --lora 8 --lora-alpha 16 --lora-dropout 0.05 --gpu a100-40gb --lora-impl litgpt"
		// LitGPT config_hub/finetune/*/lora.yaml: alpha 16, dropout 0.05,
		// AdamW with weight decay 0, max_seq_length 512, A10G.
		hubLoRA = "--seq 512 --precision bf16-true --optimizer adamw --weight-decay 0 --lora-alpha 16 --lora-dropout 0.05 --gpu a10g --lora-impl litgpt"
	)
	cases := []struct {
		name string
		args string
		// published peak allocated in bytes; 0 where the source gives an
		// out-of-memory error instead
		want float64
	}{
		{"litgpt resource table stablelm-3b mb1", stablelm + " --batch 1 --seq 1034 --lora-targets query_key_value " + litLoRA, 9.69 * gb},
		{"litgpt resource table stablelm-3b mb2", stablelm + " --batch 2 --seq 1034 --lora-targets query_key_value " + litLoRA, 12.10 * gb},
		{"litgpt resource table stablelm-3b mb4", stablelm + " --batch 4 --seq 1034 --lora-targets query_key_value " + litLoRA, 16.92 * gb},
		{"litgpt resource table llama-2-7b mb1", "Llama-2-7b --batch 1 --seq 1304 --lora-targets q_proj,v_proj " + litLoRA, 21.30 * gb},
		{"litgpt resource table llama-2-7b mb2", "Llama-2-7b --batch 2 --seq 1304 --lora-targets q_proj,v_proj " + litLoRA, 29.07 * gb},
		{"litgpt resource table llama-2-7b mb4 OOM", "Llama-2-7b --batch 4 --seq 1304 --lora-targets q_proj,v_proj " + litLoRA, 0},
		{"litgpt resource table llama-2-13b mb1", "Llama-2-13b --batch 1 --seq 1304 --lora-targets q_proj,v_proj " + litLoRA, 38.12 * gb},
		{"litgpt resource table llama-2-13b mb2 OOM", "Llama-2-13b --batch 2 --seq 1304 --lora-targets q_proj,v_proj " + litLoRA, 0},
		{"litgpt finetune_lora llama-2-7b bf16-mixed OOM", "Llama-2-7b --batch 1 --seq 1304 --lora-targets q_proj,v_proj " + strings.Replace(litLoRA, "bf16-true", "bf16-mixed", 1), 0},
		{"litgpt config_hub llama-2-7b lora", "Llama-2-7b --batch 2 --lora 32 --lora-targets q_proj,v_proj " + hubLoRA, 19.77 * gb},
		{"litgpt config_hub llama-3-8b lora", "Llama-3-8B --batch 1 --lora 32 --lora-targets q_proj,v_proj " + hubLoRA, 19.73 * gb},
		{"litgpt config_hub mistral-7b lora", "Mistral-7B-v0.1 --batch 2 --lora 32 --lora-targets q_proj,v_proj " + hubLoRA, 20.66 * gb},
		{"litgpt config_hub llama-3.2-3b lora", llama32_3 + " --batch 1 --lora 32 --lora-targets q_proj,v_proj " + hubLoRA, 9.67 * gb},
		{"litgpt config_hub llama-3.2-1b lora", llama32_1 + " --batch 1 --lora 32 --lora-targets q_proj,v_proj " + hubLoRA, 4.49 * gb},
		{"litgpt config_hub stablelm-3b lora", stablelm + " --batch 1 --lora 32 --lora-targets query_key_value " + hubLoRA, 8.58 * gb},
		// torchtune README (1814feb): full_finetune_single_device, Llama 3.2
		// 3B, batch 2, packed to 4096, bf16, torch.optim.AdamW, no compile,
		// no activation checkpointing, "Peak Memory Active (GiB)".
		{"torchtune flags table packed", "Llama-3.2-3B --batch 2 --seq 4096 --precision bf16-true --optimizer adamw --attention flash --gpu a100-80gb", 60.0 * gib},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{"estimate"}, strings.Fields(c.args)...), "--json")
			out, errs, code := run(args...)
			// a job that does not fit at batch 1 exits 1, after its JSON
			if code != 0 && (c.want != 0 || code != 1) {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var got struct {
				PeakAllocated float64 `json:"peak_allocated_bytes"`
				Fits          bool    `json:"fits"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if c.want == 0 {
				if got.Fits {
					t.Errorf("published: out of memory; batchfit says it fits (peak allocated %.2f GiB)", got.PeakAllocated/gib)
				}
				return
			}
			diff := (got.PeakAllocated - c.want) / c.want
			if diff < -publishedBound || diff > publishedBound {
				t.Errorf("peak allocated %.3f GiB, published %.3f GiB: %+.1f %%, outside ±%.0f %%",
					got.PeakAllocated/gib, c.want/gib, 100*diff, 100*publishedBound)
			}
		})
	}
}
