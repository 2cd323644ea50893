package validation

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// gqaFile is the grouped-query Llama (testdata/hf/llama-gqa-small: hidden
// 1024, 16 heads, 4 key/value heads, 4 layers) measured on the H200 under
// PyTorch 2.11 and transformers 5.17, bf16 autocast, AdamW, batch 4,
// sequence 1024, with SDPA pinned to each kernel (validation/cases-gqa.json).
const gqaFile = "../testdata/measured/h200-torch2.11-gqa.json"

// gqaAllocatedTolerance is the tolerance TestMeasuredH200MLPAndGPT2 holds
// the transformers models of the H200 measurement (GPT-2) to;
// gqaReservedTolerance the band of peak reserved docs/accuracy.md §3.0
// reports for the H200's measured jobs at the batches that ran
// (−0.85…+1.4 %): no H200 test holds peak reserved to a tolerance of its
// own.
const (
	gqaAllocatedTolerance = 0.0025
	gqaReservedTolerance  = 0.015
)

// gqaCopy is the attention output's .contiguous() copy batchfit charges and
// the fused kernels do not make (below): bf16 [batch 4, sequence 1024,
// hidden 1024] a layer, four layers.
const gqaCopy = 4 * (4 * 1024 * 1024 * 2)

// gqaMisses are the figures outside those tolerances, each with its cause.
// A miss must still be one (outside the tolerance, on the side it was
// found), so that a change that mends it is seen and the entry removed;
// where the cause has a size (over > 0), the excess must be no more than
// it.
var gqaMisses = map[string]struct {
	allocated, reserved bool // which figure misses
	high                bool // predicted above the measurement
	over                int64
	why                 string
}{
	// Per phase (steps 1 and 2) the forward ends above the measurement
	// and every later peak carries it: the copy batchfit makes at
	// attn_output.transpose(1, 2).contiguous(). The rotary embedding's
	// q * cos + rotate_half(q) * sin takes the layout of q, a transposed
	// view of q_proj's output (TensorIterator orders its output's strides
	// after its first input's), so the kernel's q.transpose(1, 2) is
	// contiguous, mha_fwd's out = empty_like(q) is laid out [B, L, H, D]
	// and the .contiguous() copies nothing. The math case's output is a
	// matmul's [B, H, L, D] and does copy, as predicted.
	"llama-gqa-b4-s1024-ampbf16-adamw-sdpa-flash": {allocated: true, high: true, over: gqaCopy, why: "the attention output's contiguous copy flash does not make"},
	"llama-gqa-b4-s1024-ampbf16-adamw-sdpa-cudnn": {allocated: true, high: true, over: gqaCopy, why: "the attention output's contiguous copy cuDNN attention does not make"},
	"llama-gqa-b4-s1024-ampbf16-adamw-sdpa-auto":  {allocated: true, high: true, over: gqaCopy, why: "the attention output's contiguous copy cuDNN attention does not make"},
	// Peak allocated is within 0.2 % in every phase; the segments are
	// not: by step 1 the measured forward reserves 5.40 GB where the
	// replay reserves 5.04 GB, and the backward 5.93 GB against 5.56 GB.
	// Which of the math kernel's blocks (the [B, H, L, S] scores, 318 MiB
	// a layer) open the extra segments no recording shows yet.
	"llama-gqa-b4-s1024-ampbf16-adamw-sdpa-math": {reserved: true, why: "segments the math kernel's scores open, unrecorded"},
	// The forward of steps 1 and 2 ends 17.9 MB above the measurement
	// (4.8 MB in step 0); not explained.
	"llama-gqa-b4-s1024-ampbf16-adamw-eager": {allocated: true, high: true, why: "17.9 MB more in the steady forward, unexplained"},
}

// Every case of the grouped-query measurement that ran is held to the
// H200 tolerances, save gqaMisses, each held to its cause.
func TestMeasuredH200GQA(t *testing.T) {
	m, err := Load(gqaFile)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := Compare(m)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Status != "ok" {
			t.Errorf("%s: status %q, want a measured peak", c.ID, c.Status)
			continue
		}
		seen[c.ID] = true
		x, miss := gqaMisses[c.ID]
		for _, f := range []struct {
			name      string
			e, tol    float64
			p, m      int64
			knownMiss bool
		}{
			{"allocated", c.ErrAllocated(), gqaAllocatedTolerance, c.PredictedAllocated, c.MeasuredAllocated, miss && x.allocated},
			{"reserved", c.ErrReserved(), gqaReservedTolerance, c.PredictedReserved, c.MeasuredReserved, miss && x.reserved},
		} {
			switch {
			case f.knownMiss && (f.e >= -f.tol && f.e <= f.tol):
				t.Errorf("%s: peak %s %+.2f %%, within ±%.2f %%: no longer a miss (%s), take it off gqaMisses", c.ID, f.name, 100*f.e, 100*f.tol, x.why)
			case f.knownMiss && (f.e > 0) != x.high:
				t.Errorf("%s (%s): peak %s %+.2f %%, on the other side of the measurement", c.ID, x.why, f.name, 100*f.e)
			case f.knownMiss && x.over > 0 && f.p-f.m > x.over:
				t.Errorf("%s (%s): peak %s %d bytes over, more than the %d its cause accounts for", c.ID, x.why, f.name, f.p-f.m, x.over)
			case !f.knownMiss && !(f.e >= -f.tol && f.e <= f.tol):
				t.Errorf("%s: peak %s predicted %d, measured %d bytes (%+.2f %%, want within ±%.2f %%)", c.ID, f.name, f.p, f.m, 100*f.e, 100*f.tol)
			}
		}
	}
	for id := range gqaMisses {
		if !seen[id] {
			t.Errorf("known miss %s: no such case ran in %s", id, gqaFile)
		}
	}
	// math, flash, cudnn, auto and eager ran; efficient did not (below)
	if len(seen) != 5 {
		t.Errorf("%d cases ran, want 5", len(seen))
	}
}

// The memory-efficient kernel pinned for the grouped-query model: PyTorch
// raised "No available kernel" (transformers 5.17 passes enable_gqa=True,
// which can_use_mem_efficient_attention refuses:
// check_batch_size_and_num_heads_dense<false>), and batchfit refuses the
// same job as a setup error rather than predicting memory for it.
func TestMeasuredH200GQAEfficientRefused(t *testing.T) {
	m, err := Load(gqaFile)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range m.Results {
		if r.Case.SDPABackend != string(train.AttentionEfficient) {
			continue
		}
		found = true
		var raw struct {
			Results []struct {
				ID    string `json:"id"`
				Error string `json:"error"`
			} `json:"results"`
		}
		if err := loadJSON(gqaFile, &raw); err != nil {
			t.Fatal(err)
		}
		for _, x := range raw.Results {
			if x.ID == r.ID && (r.Status != "error" || !strings.Contains(x.Error, "No available kernel")) {
				t.Errorf("%s: status %q, error %q; want the error \"No available kernel\"", r.ID, r.Status, x.Error)
			}
		}
		q, err := Request(r, m.Environment)
		if err != nil {
			t.Fatal(err)
		}
		_, err = predict.Run(context.Background(), q)
		if !predict.IsSetupError(err) || !strings.Contains(err.Error(), "check_batch_size_and_num_heads_dense<false>") ||
			!strings.Contains(err.Error(), "16 query heads and 4 key/value heads") {
			t.Errorf("%s: predict.Run error %v, want the setup error of the memory-efficient kernel's grouped-query check", r.ID, err)
		}
		// the same job with flash, which takes enable_gqa, runs
		q.Setup.Attention = train.AttentionFlash
		if _, err := predict.Run(context.Background(), q); err != nil {
			t.Errorf("%s under flash: %v", r.ID, err)
		}
	}
	if !found {
		t.Fatalf("no efficient case in %s", gqaFile)
	}
}

func loadJSON(path string, v any) error {
	data, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
