package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// A batch-size schedule with empty_cache() after every step, worked out by
// hand from the caching allocator's rules under the 2.5 profile (--torch
// 2.5: no cuBLASLt workspace of its own; CUDACachingAllocator.cpp, 2.5:
// sizes round up to 512 bytes; requests up to 1 MiB come from 2 MiB
// segments of the small pool; 1–10 MiB from 20 MiB segments; a free block
// is found best-fit; empty_cache() returns wholly free segments only).
//
// The model is one Linear 256→256 (testdata/one_linear.yaml): weight
// 256 KiB, bias 1 KiB. On a t4 the cuBLAS workspace is 8.125 MiB per
// handle, allocated once in forward and once in backward (two handles,
// never freed). SGD without momentum keeps no state; zero_grad sets the
// gradients to None.
//
// Step 1, batch 1024 (input and target 1 MiB each, output 1 MiB):
//
//	small segment A (2 MiB): weight 256K, bias 1K, input 1M        1281K
//	small segment B (2 MiB): target 1M (A has 767K left), output 1M (full)
//	large segment C (20 MiB): forward workspace 8.125M
//	A: loss 512, its scratch 512                                   1282K
//	small segment D (2 MiB): grad of the output 1M (A has 766K)
//	free output (B has 1M free); C: backward workspace 8.125M (C split)
//	A: weight grad 256K, bias grad 1K (best fit: A's 766K)
//	the bias gradient's row sum (Reduce.cuh setReduceConfig on the T4's
//	40 SMs of 1024 threads: [1024, 256] float, output_vec_size 4, block
//	32×4, grid.x 2, 256 values per thread, ctas_per_output
//	max(min(ceil(320/2), ceil(256/16)), 1) = 16): a staging buffer of
//	4 × 256 × 16 × 32 × 4 = 2 MiB (C's 3.75M free tail) and 8 bytes of
//	semaphores (512 in A), both freed when the sum returns
//	free the transients and, at zero_grad, the gradients
//
//	end of step 1: allocated = 257K + 2M batch + 512 loss + 16.25M
//	workspace = 18945.5 KiB; reserved 3×2 + 20 = 26 MiB; peak allocated
//	at the bias gradient's sum: 18945.5K + 512 + 1M + 257K + 2M + 512 =
//	22275.5 KiB.
//	empty_cache(): D is wholly free (2 MiB); A, B, C hold live blocks:
//	reserved after 24 MiB.
//
// Step 2, batch 64 (64 KiB each): its input and target come from A's 766.5K
// free tail before step 1's batch is freed (peak allocated there: 18945.5K
// + 128K = 19073.5 KiB); then step 1's input frees 1M in A and its target
// makes B wholly free; everything else of step 2 fits A's free blocks
// (best fit), so reserved stays 24 MiB. End: 257K + 128K + 512 (the loss
// kept until the next forward) + 16.25M = 17025.5 KiB. empty_cache()
// returns B: 2 MiB, reserved after 22 MiB.
//
// nvidia-smi shows reserved + the CUDA context (--context 300MiB).
func TestScheduleEmptyCacheHandWorked(t *testing.T) {
	t.Parallel()
	const K, M = 1024, 1024 * 1024
	const ctx = 300 * M
	type step struct {
		peakAlloc, peakRes, endAlloc, endRes, released, after int64
	}
	want := []step{
		{peakAlloc: 22275*K + K/2, peakRes: 26 * M, endAlloc: 18945*K + K/2, endRes: 26 * M, released: 2 * M, after: 24 * M},
		{peakAlloc: 19073*K + K/2, peakRes: 24 * M, endAlloc: 17025*K + K/2, endRes: 24 * M, released: 2 * M, after: 22 * M},
	}
	args := []string{"estimate", "testdata/one_linear.yaml", "--batch", "1024,64", "--gpu", "t4", "--optimizer", "sgd", "--empty-cache", "--context", "300MiB", "--torch", "2.5"}
	out, errs, code := run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct{ Steps []report.StepJSON }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Steps) != len(want) {
		t.Fatalf("%d steps, want %d: %s", len(got.Steps), len(want), out)
	}
	text, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for i, w := range want {
		g := got.Steps[i]
		if g.PeakAllocatedBytes != w.peakAlloc || g.PeakReservedBytes != w.peakRes || g.EndAllocatedBytes != w.endAlloc || g.EndReservedBytes != w.endRes {
			t.Errorf("step %d: peaks %d / %d, end %d / %d; want %d / %d, %d / %d", i+1, g.PeakAllocatedBytes, g.PeakReservedBytes,
				g.EndAllocatedBytes, g.EndReservedBytes, w.peakAlloc, w.peakRes, w.endAlloc, w.endRes)
		}
		if !g.EmptyCacheAfter || g.ReleasedBytes != w.released || g.ReservedAfterBytes == nil || *g.ReservedAfterBytes != w.after ||
			g.EndNvidiaSMIBytes != w.endRes+ctx || g.NvidiaSMIAfterBytes == nil || *g.NvidiaSMIAfterBytes != w.after+ctx {
			t.Errorf("step %d: empty_cache %+v, want %d released, %d reserved after", i+1, g, w.released, w.after)
		}
		// the text's row says the same, in the same step
		row := fmt.Sprintf("  %d  %d  ", i+1, g.Batch)
		cells := []string{report.FormatBytes(w.peakAlloc), report.FormatBytes(w.peakRes), report.FormatBytes(w.endAlloc), report.FormatBytes(w.endRes), report.FormatBytes(w.endRes + ctx),
			report.FormatBytes(w.released), report.FormatBytes(w.after), report.FormatBytes(w.after + ctx)}
		var line string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.Join(strings.Fields(l), "  "), strings.TrimSpace(row)) && strings.HasPrefix(l, "  ") {
				line = l
			}
		}
		if norm := strings.Join(strings.Fields(line), " "); norm != strings.Join(strings.Fields(row+strings.Join(cells, " ")), " ") {
			t.Errorf("text row for step %d: %q, want the cells %q", i+1, line, cells)
		}
		if s := fmt.Sprintf("after step %d: empty_cache() returned %s", i+1, report.FormatBytes(w.released)); !strings.Contains(text, s) {
			t.Errorf("text does not say %q:\n%s", s, text)
		}
	}
}
