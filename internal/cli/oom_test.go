package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// oom --model answers the largest batch with the margin maxbatch holds its
// answers to (predict.Band.Margin: the band's Under times the GPU's total),
// not the bare prediction.
func TestOOMModelMargin(t *testing.T) {
	t.Parallel()
	// A 15.78 GiB GPU, 10 MiB free after 14.56 GiB allocated and 921.60 MiB
	// cached: 15.78 − 0.01 − 14.56 − 0.90 GiB lie outside PyTorch.
	msg := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.78 GiB of which 10.00 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 921.60 MiB is reserved by PyTorch but unallocated."
	type fit struct {
		MaxBatch    int64 `json:"max_batch"`
		MarginBytes int64 `json:"margin_bytes"`
	}
	answer := func(args ...string) fit {
		t.Helper()
		out, errs, code := run(append([]string{"oom", msg, "--model", "gpt2", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("oom %v: exit %d: %s", args, code, errs)
		}
		var v struct{ Fit fit }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		return v.Fit
	}
	band, bare := answer(), answer("--margin", "0")
	if band.MarginBytes <= 0 {
		t.Errorf("default margin = %d bytes, want the band's (> 0)", band.MarginBytes)
	}
	if bare.MarginBytes != 0 {
		t.Errorf("--margin 0: margin = %d bytes, want 0", bare.MarginBytes)
	}
	// A margin only takes room away.
	if band.MaxBatch > bare.MaxBatch {
		t.Errorf("batch %d with the margin, %d without: the margin cannot allow more", band.MaxBatch, bare.MaxBatch)
	}
	// 10% of 15.78 GiB: 15.78 × 2³⁰ = 16943645982.72, read as
	// 16943645983 bytes, a tenth of which is 1694364598.3, rounded up.
	if got, want := answer("--margin", "10%").MarginBytes, int64(1694364599); got != want {
		t.Errorf("--margin 10%%: margin = %d bytes, want %d", got, want)
	}
	out, errs, code := run("oom", msg, "--model", "gpt2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"with the margin is", "margin: "} {
		if !strings.Contains(out, want) {
			t.Errorf("text does not contain %q:\n%s", want, out)
		}
	}
}
