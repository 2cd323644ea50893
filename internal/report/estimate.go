package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// WriteSuggestions prints the smallest changes that make the job of res
// fit (ans), or, when none does, what would (lg: the larger GPUs searched).
func WriteSuggestions(w io.Writer, res *predict.Result, ans *plan.Answer, lg *Larger) {
	fmt.Fprintln(w)
	if len(ans.Best) == 0 {
		fmt.Fprintf(w, "no change of micro-batch and accumulation, precision, checkpointing, optimizer, allocator, LoRA or QLoRA adapters, or 8-bit or Adafactor states makes it fit: ")
		fmt.Fprintln(w, strings.TrimPrefix(NothingFits(predict.Request{GPU: res.GPU}, ans, lg).Error(), "nothing fits on "+res.GPU.Name+" with a margin of 0 bytes: "))
		return
	}
	fmt.Fprintf(w, "the %s that make it fit (same %s per optimizer step; 'batchfit plan' ranks every plan by speed):\n",
		map[bool]string{true: "smallest change", false: fmt.Sprintf("%d smallest changes", len(ans.Best))}[len(ans.Best) == 1], Plural(int(ans.GlobalBatch), "sample"))
	for i, p := range ans.Best {
		fmt.Fprintf(w, "  %d. %s\n", i+1, strings.Join(p.Changes, "; "))
		line := fmt.Sprintf("device total %s", FormatBytes(p.Result.DeviceTotal))
		if s := ans.PeakSaving(p); s > 0 {
			line += fmt.Sprintf(", %s less at the peak", FormatBytes(s))
		}
		if p.Seconds > 0 {
			line += fmt.Sprintf(", step time %s", FormatSeconds(p.Seconds))
			if b := ans.Base.Seconds; b > 0 {
				line += fmt.Sprintf(" (now %s)", FormatSeconds(b))
			}
		}
		fmt.Fprintf(w, "     %s\n", line)
	}
}

// FormatBytes is how batchfit prints a size in bytes (alloc.FormatSize),
// on the command line and on the page alike.
func FormatBytes(n int64) string { return alloc.FormatSize(n) }

// FormatBytesApart prints two different sizes that a message compares, in
// bytes as well when their rounded forms are the same ("2048.00 GiB is
// more than 2048.00 GiB" says nothing).
func FormatBytesApart(a, b int64) (string, string) {
	sa, sb := FormatBytes(a), FormatBytes(b)
	if sa == sb && a != b {
		return fmt.Sprintf("%s (%d bytes)", sa, a), fmt.Sprintf("%s (%d bytes)", sb, b)
	}
	return sa, sb
}

// SetupLine is the one line that names a prediction's job: the model,
// its batch and setup, the rules and the GPU.
func SetupLine(res *predict.Result) string {
	s := res.Setup
	opt := string(s.Optimizer.Kind)
	switch {
	case s.Optimizer.Bnb():
		opt = s.Optimizer.Name() + " (bitsandbytes)"
	case s.Optimizer.Kind == train.Adafactor:
		opt += " (transformers)"
	case s.Optimizer.Kind != "none":
		opt += " (" + string(s.Optimizer.Impl) + ")"
	}
	if res.Infer != nil {
		parts := append([]string{res.Model}, inferenceLine(res)...)
		parts = append(parts, string(s.Precision), "PyTorch "+s.Profile.Version+"+ rules", res.GPU.Name)
		return strings.Join(parts, " · ")
	}
	parts := []string{res.Model, fmt.Sprintf("batch %d", res.Config.Batch)}
	if res.Config.Seq > 0 {
		parts = append(parts, fmt.Sprintf("seq %d", res.Config.Seq))
	}
	parts = append(parts, string(s.Precision), opt)
	if s.Accumulate > 1 {
		parts = append(parts, fmt.Sprintf("accumulate %d", s.Accumulate))
	}
	if q := res.Config.Quant; q != nil {
		parts = append(parts, "quantized "+q.String())
	}
	if a := res.Config.Adapters; a != nil {
		if a.Rank > 0 {
			parts = append(parts, fmt.Sprintf("LoRA r=%d on %s", a.Rank, strings.Join(a.Targets, ",")))
		}
		if len(a.Freeze) > 0 {
			parts = append(parts, "frozen "+strings.Join(a.Freeze, ","))
		}
	}
	switch {
	case s.Checkpoint == train.FullCheckpoint:
		parts = append(parts, "checkpointing")
	case s.Checkpoint.On():
		parts = append(parts, "checkpointing "+s.Checkpoint.String())
	}
	if c := res.Config; c.TP > 1 {
		parts = append(parts, fmt.Sprintf("tensor parallel %d", c.TP))
	}
	if c := res.Config; c.PP > 1 {
		parts = append(parts, fmt.Sprintf("pipeline stage %d of %d (1F1B, %d micro-batches)", c.Stage, c.PP, s.Accumulate))
	}
	if s.Parallel.On() {
		parts = append(parts, s.Parallel.String()+" (one rank)")
	}
	parts = append(parts, "PyTorch "+s.Profile.Version+"+ rules", res.GPU.Name)
	return strings.Join(parts, " · ")
}

// WriteEstimate prints a prediction as text: its breakdown, the peak,
// the verdict and the band, the step time and, for a schedule of batches,
// every step.
func WriteEstimate(w io.Writer, res *predict.Result, batches []int64) {
	tl := res.Timeline
	head := SetupLine(res)
	if len(batches) > 1 {
		// a schedule: the header names every step's batch, not the first's
		var bs []string
		for _, b := range batches {
			bs = append(bs, fmt.Sprint(b))
		}
		head = strings.Replace(head, fmt.Sprintf(" · batch %d · ", res.Config.Batch),
			fmt.Sprintf(" · batch schedule %s (the breakdown below: batch %d; the peaks: every step's) · ", strings.Join(bs, ", "), res.Config.Batch), 1)
	}
	fmt.Fprintln(w, head)
	if res.Note != "" {
		fmt.Fprintln(w, res.Note)
	}
	fmt.Fprintln(w)
	if res.Infer != nil {
		writeInference(w, res)
	} else {
		writeTraining(w, res)
	}
	fmt.Fprintln(w)
	if tl.OOM != nil {
		// the replay stops at the allocation that fails: these figures
		// are the allocator's there, not the step's peak
		fmt.Fprintln(w, "when it runs out of memory (allocated, by what it holds; the step stops there):")
	} else {
		fmt.Fprintln(w, "at the peak (allocated, by what it holds):")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range trace.Categories() {
		if n := tl.AtPeak[c]; n > 0 {
			fmt.Fprintf(tw, "  %s\t%s\t\n", strings.ReplaceAll(c.String(), "_", " "), FormatBytes(n))
		}
	}
	if res.PeakAt != nil {
		fmt.Fprintf(tw, "  reached in\t%s\t\n", peakWhere(res))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peak allocated\t%s\t(torch.cuda.max_memory_allocated)\t\n", FormatBytes(tl.PeakAllocated))
	fmt.Fprintf(tw, "peak reserved\t%s\t(torch.cuda.max_memory_reserved)\t\n", FormatBytes(tl.PeakReserved))
	fmt.Fprintf(tw, "CUDA context\t%s\t(outside PyTorch's allocator)\t\n", FormatBytes(res.Context-res.NCCL))
	if res.Modules > 0 {
		fmt.Fprintf(tw, "  of which kernels loaded by the step\t%s\t(lazy module loading: on their first launch, measured)\t\n", FormatBytes(res.Modules))
	}
	if res.Libraries > 0 {
		fmt.Fprintf(tw, "  of which libraries\t%s\t(cuBLAS's own workspaces, outside PyTorch's allocator)\t\n", FormatBytes(res.Libraries))
	}
	if res.NCCL > 0 {
		fmt.Fprintf(tw, "NCCL buffers\t%s\t(outside PyTorch's allocator: an upper bound)\t\n", FormatBytes(res.NCCL))
	}
	fmt.Fprintf(tw, "device total\t%s\t(what nvidia-smi shows)\t\n", FormatBytes(res.DeviceTotal))
	fmt.Fprintf(tw, "GPU capacity\t%s\t%s\t\n", FormatBytes(res.GPU.Capacity), capacityNote(res.GPU))
	tw.Flush()
	if tl.OOM != nil {
		fmt.Fprintf(w, "out of memory: the figures above are the allocator's at the failure; the step needs at least %s (its requested peak + CUDA context, a lower bound)\n", FormatBytes(plan.Need(res)))
	}
	fmt.Fprintln(w)
	if res.Fits {
		fmt.Fprintf(w, "fits: yes, %s of headroom — %s\n", FormatBytes(res.Headroom()), res.Decider)
	} else {
		fmt.Fprintf(w, "fits: no — %s\n", res.Decider)
	}
	if b := bandJSON(res); tl.OOM == nil {
		verdict := "fits even then"
		if !b.FitsWithBand {
			verdict = "which would not fit"
		}
		fmt.Fprintf(w, "band: batchfit's device total has been %s: the real one may reach %s, %s\n",
			res.Band.String(), FormatBytes(b.DeviceTotalHighBytes), verdict)
	}
	writeTime(w, res)
	if len(batches) > 1 {
		writeSchedule(w, res, batches)
	}
}

// writeTraining prints the static figures of a training step.
func writeTraining(w io.Writer, res *predict.Result) {
	sum := res.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "parameters\t%s\t%s params\t\n", FormatBytes(sum.ParametersBytes), Commas(sum.ParamCount))
	if sum.QuantizedBytes > 0 {
		fmt.Fprintf(tw, "  quantized Linear weights\t%s\t%s params, with their constants\t\n", FormatBytes(sum.QuantizedBytes), Commas(sum.QuantizedParamCount))
	}
	fmt.Fprintf(tw, "gradients\t%s\t\t\n", FormatBytes(sum.GradientsBytes))
	fmt.Fprintf(tw, "optimizer state\t%s\t\t\n", FormatBytes(sum.OptimizerStateBytes))
	if sum.GradBucketBytes > 0 {
		what := "(DDP's reducer: the gradients are copied in and reduced there)"
		if res.Setup.Parallel.IsZeRO() {
			what = "(ZeRO-3's reduction bucket, reduce_bucket_size elements)"
		}
		fmt.Fprintf(tw, "gradient buckets\t%s\t%s\t\n", FormatBytes(sum.GradBucketBytes), what)
	}
	if sum.OffloadedBytes > 0 {
		fmt.Fprintf(tw, "offloaded to the host\t%s\t(CPU memory: not on the GPU)\t\n", FormatBytes(sum.OffloadedBytes))
	}
	if sum.PagedOptimizerStateBytes > 0 {
		fmt.Fprintf(tw, "paged optimizer state\t%s\t(CUDA unified memory, outside PyTorch's allocator: paged to the host when the device is full)\t\n", FormatBytes(sum.PagedOptimizerStateBytes))
	}
	fmt.Fprintf(tw, "saved activations\t%s\t(end of forward)\t\n", FormatBytes(sum.ActivationsBytes))
	if sum.CastCacheBytes > 0 {
		fmt.Fprintf(tw, "autocast weight copies\t%s\t\t\n", FormatBytes(sum.CastCacheBytes))
	}
	fmt.Fprintf(tw, "batch data\t%s\t\t\n", FormatBytes(sum.BatchDataBytes))
	if sum.WorkspaceBytes > 0 {
		if sum.LibraryBytes > 0 {
			fmt.Fprintf(tw, "cuBLAS workspace\t%s\t(cuBLAS's own: outside PyTorch's allocator, in the context line)\t\n", FormatBytes(sum.WorkspaceBytes))
		} else {
			fmt.Fprintf(tw, "cuBLAS workspace\t%s\t\t\n", FormatBytes(sum.WorkspaceBytes))
		}
	}
	if sum.ConvWorkspaceBytes > 0 {
		how := "an upper bound"
		if sum.ConvWorkspaceNHWC {
			how = "the tensor cores' NHWC copies"
		}
		fmt.Fprintf(tw, "cuDNN workspace\t%s\t(the largest, freed after each convolution: %s)\t\n", FormatBytes(sum.ConvWorkspaceBytes), how)
	}
	tw.Flush()
	if len(res.Stages) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "every pipeline stage (the breakdown is the one that fits worst):")
		st := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(st, "  stage	parameters	peak allocated	peak reserved	device total	fits	")
		for _, s := range res.Stages {
			fits := "yes"
			if !s.Fits {
				fits = "no"
			}
			fmt.Fprintf(st, "  %d	%s	%s	%s	%s	%s	\n", s.Stage, Commas(s.Params), FormatBytes(s.PeakAllocated), FormatBytes(s.PeakReserved), FormatBytes(s.DeviceTotal), fits)
		}
		st.Flush()
	}
	writeNotes(w, res)
	if sum.TrainableParamCount != sum.ParamCount {
		// PEFT's print_trainable_parameters, figure for figure
		fmt.Fprintf(w, "trainable params: %s || all params: %s || trainable%%: %.4f\n", Commas(sum.TrainableParamCount), Commas(sum.ParamCount),
			100*float64(sum.TrainableParamCount)/float64(max(sum.ParamCount, 1)))
	}
}

// writeTime prints the step-time model's figures.
// capacityNote says what the capacity is: what PyTorch can use, beside
// nvidia-smi's total, and whether it was derived.
func capacityNote(g gpu.GPU) string {
	s := g.Marketing
	if g.SMITotal > 0 {
		s += fmt.Sprintf(": what PyTorch can use; nvidia-smi's total %s", FormatBytes(g.SMITotal))
	}
	if g.CapacityDerived {
		s += ", derived"
	}
	return s
}

func writeTime(w io.Writer, res *predict.Result) {
	e := res.Time
	if e == nil {
		if !res.GPU.Rates.Known() && res.Infer == nil && !res.Setup.Parallel.On() && res.Config.TP <= 1 && res.Config.PP <= 1 {
			fmt.Fprintf(w, "\nno step time: a size alone says nothing of speed (--like GPU names the catalog GPU it is)\n")
		}
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "step time %s on %s (calibrated model; bound %s, the roofline of the datasheet peaks; see docs/accuracy.md §4)\n",
		FormatSeconds(e.Seconds), res.GPU.Name, FormatSeconds(e.Bound.Seconds))
	var parts []string
	for _, p := range cost.Parts() {
		if e.By[p] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", p, FormatSeconds(e.By[p])))
		}
	}
	if e.Loop > 0 {
		parts = append(parts, fmt.Sprintf("the loop's own work %s (--loop-overhead)", FormatSeconds(e.Loop)))
	}
	fmt.Fprintf(w, "  %s\n", strings.Join(parts, ", "))
	writeComm(w, res)
	fmt.Fprintf(w, "  %s\n", throughputLine(e))
}

// writeComm prints the communication under parallelism: the compute, all
// of the collectives' time, and what the step waits for.
func writeComm(w io.Writer, res *predict.Result) {
	c := res.Comm
	if c == nil {
		return
	}
	var compute float64
	for _, p := range cost.Parts() {
		compute += res.Time.By[p]
	}
	line := fmt.Sprintf("  compute %s, communication %s, exposed %s", FormatSeconds(compute), FormatSeconds(c.Seconds), FormatSeconds(c.Exposed))
	if c.Bubble > 0 {
		line += fmt.Sprintf(", pipeline bubble %s", FormatSeconds(c.Bubble))
	}
	fmt.Fprintln(w, line)
	var by []string
	if c.Data > 0 {
		by = append(by, fmt.Sprintf("data-parallel %s (exposed %s) over %s", FormatSeconds(c.Data), FormatSeconds(c.DataExposed), c.DataLink))
	}
	if c.Tensor > 0 {
		by = append(by, fmt.Sprintf("tensor-parallel %s over %s", FormatSeconds(c.Tensor), c.ModelLink))
	}
	if c.Host > 0 {
		by = append(by, fmt.Sprintf("offload copies %s", FormatSeconds(c.Host)))
	}
	if c.Pipeline > 0 {
		by = append(by, fmt.Sprintf("pipeline sends %s over %s", FormatSeconds(c.Pipeline), c.PipeLink))
	}
	if len(by) > 0 {
		fmt.Fprintf(w, "    %s\n", strings.Join(by, "; "))
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func throughputLine(e *cost.Estimate) string {
	s := fmt.Sprintf("%s samples/s", FormatRate(e.SamplesPerSecond()))
	if e.Tokens > 0 {
		s += fmt.Sprintf(", %s tokens/s", FormatRate(e.TokensPerSecond()))
	}
	return s + fmt.Sprintf(" · model FLOPs utilisation %.0f%% (bound %s samples/s, %.0f%%) · %s kernels",
		100*e.MFU, FormatRate(e.BoundSamplesPerSecond()), 100*e.Bound.MFU, Commas(e.Kernels))
}

// FormatSeconds prints a duration with three digits or so: a step of hours
// (a large model on a small GPU) in hours or minutes, not 54984.0 s.
func FormatSeconds(s float64) string {
	switch {
	case s >= 3600:
		return fmt.Sprintf("%.1f h", s/3600)
	case s >= 60:
		return fmt.Sprintf("%.1f min", s/60)
	case s >= 10:
		return fmt.Sprintf("%.1f s", s)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.0f µs", s*1e6)
}

// FormatRate prints a rate (samples or tokens a second) with three
// digits or so.
func FormatRate(r float64) string {
	switch {
	case r >= 100:
		return Commas(int64(math.Round(r)))
	case r >= 10:
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// Commas prints n with thousands separated by commas.
func Commas(n int64) string { return chart.Commas(n) }

// writeSchedule prints the per-step figures of a batch-size schedule and
// explains them from the simulation. nvidia-smi shows reserved plus the
// CUDA context; an empty_cache() right after a step is that step's, the
// call after the last step included (alloc.StepStats).
func writeSchedule(w io.Writer, res *predict.Result, batches []int64) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "per step (nvidia-smi shows reserved + the CUDA context's %s):\n", FormatBytes(res.Context))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := "  step\tbatch\tpeak allocated\tpeak reserved\tallocated at end\treserved at end\tnvidia-smi at end\t"
	if res.Setup.EmptyCache {
		hdr += "empty_cache() returned\treserved after\tnvidia-smi after\t"
	}
	fmt.Fprintln(tw, hdr)
	steps := res.Timeline.Steps
	for i, st := range steps {
		if i >= len(batches) {
			break
		}
		line := fmt.Sprintf("  %d\t%d\t%s\t%s\t%s\t%s\t%s\t", i+1, batches[i], FormatBytes(st.PeakAllocated), FormatBytes(st.PeakReserved),
			FormatBytes(st.EndAllocated), FormatBytes(st.EndReserved), FormatBytes(st.EndReserved+res.Context))
		if res.Setup.EmptyCache {
			if st.EmptiedAfter {
				line += fmt.Sprintf("%s\t%s\t%s\t", FormatBytes(st.Released), FormatBytes(st.ReservedAfter), FormatBytes(st.ReservedAfter+res.Context))
			} else {
				line += "-\t-\t-\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, line := range explainSchedule(steps, batches, res.Context) {
		fmt.Fprintln(w, "  "+line)
	}
}

func explainSchedule(steps []alloc.StepStats, batches []int64, context int64) []string {
	var out []string
	for i := 0; i < len(steps) && i < len(batches); i++ {
		cur := steps[i]
		if i > 0 {
			prev := steps[i-1]
			// the state the step starts from: what empty_cache left, or
			// the previous step's end
			start := prev.EndReserved
			if prev.EmptiedAfter {
				start = prev.ReservedAfter
			}
			switch {
			case cur.PeakReserved > start && batches[i] < batches[i-1] && !prev.EmptiedAfter:
				out = append(out, fmt.Sprintf("step %d (batch %d): reserved grew by %s (from %s to %s) although the batch shrank: cached blocks did not match the new sizes (best fit per size class), so new segments were allocated.",
					i+1, batches[i], FormatBytes(cur.PeakReserved-start), FormatBytes(start), FormatBytes(cur.PeakReserved)))
			case cur.PeakReserved > start:
				out = append(out, fmt.Sprintf("step %d (batch %d): reserved grew by %s (from %s to %s): the cached free blocks were too few or too small, so new segments were allocated.",
					i+1, batches[i], FormatBytes(cur.PeakReserved-start), FormatBytes(start), FormatBytes(cur.PeakReserved)))
			case batches[i] < batches[i-1]:
				out = append(out, fmt.Sprintf("step %d (batch %d): the smaller batch needed only %s allocated, but reserved stayed at %s: the %s of free blocks cached by earlier steps are kept by PyTorch's caching allocator until empty_cache() (nvidia-smi still shows them).",
					i+1, batches[i], FormatBytes(cur.PeakAllocated), FormatBytes(cur.EndReserved), FormatBytes(start-prev.EndAllocated)))
			default:
				out = append(out, fmt.Sprintf("step %d (batch %d): served entirely from cached segments; reserved did not grow beyond %s.", i+1, batches[i], FormatBytes(start)))
			}
		}
		if cur.EmptiedAfter {
			out = append(out, fmt.Sprintf("after step %d: empty_cache() returned %s: reserved %s → %s, nvidia-smi %s → %s; allocated stays %s. The %s left are segments that still hold a live block (parameters, buffers, optimizer state, the cuBLAS workspace, the batch kept for the next step): empty_cache() returns only wholly free segments.",
				i+1, FormatBytes(cur.Released), FormatBytes(cur.EndReserved), FormatBytes(cur.ReservedAfter), FormatBytes(cur.EndReserved+context), FormatBytes(cur.ReservedAfter+context),
				FormatBytes(cur.EndAllocated), FormatBytes(cur.ReservedAfter)))
		}
	}
	return out
}

// writeNotes prints the prediction's notes (predict.Result.Notes) as
// "note: …" lines; the communication's are printed with the step time.
func writeNotes(w io.Writer, res *predict.Result) {
	for _, n := range res.Notes {
		// the source's own note is printed under the header already
		if n.Code != predict.CommNoteCode && n.Text != res.Note {
			fmt.Fprintln(w, "note: "+n.Text)
		}
	}
}
