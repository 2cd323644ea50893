package report

import (
	"encoding/json"
	"io"
	"math"

	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/trace"
)

// WriteJSON encodes v as the JSON of every --json output: indented by two
// spaces, one value a line.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// EstimateJSON is the stable JSON form of a prediction. Bytes are integers.
type EstimateJSON struct {
	Model               string `json:"model"`
	SourceNote          string `json:"source_note,omitempty"`
	Batch               int64  `json:"batch"`
	Seq                 int64  `json:"seq,omitempty"`
	GPU                 string `json:"gpu"`
	Precision           string `json:"precision"`
	Optimizer           string `json:"optimizer"`
	OptimizerImpl       string `json:"optimizer_impl"`
	Accumulate          int    `json:"accumulate"`
	Checkpointing       bool   `json:"checkpointing"`
	Checkpoint          string `json:"checkpoint"`
	TorchProfile        string `json:"torch_profile"`
	ParamCount          int64  `json:"param_count"`
	TrainableParamCount int64  `json:"trainable_param_count"`
	ParametersBytes     int64  `json:"parameters_bytes"`
	BuffersBytes        int64  `json:"buffers_bytes"`
	GradientsBytes      int64  `json:"gradients_bytes"`
	OptimizerStateBytes int64  `json:"optimizer_state_bytes"`
	// PagedOptimizerStateBytes are a paged optimizer's states in unified
	// memory, outside PyTorch's allocator.
	PagedOptimizerStateBytes int64 `json:"paged_optimizer_state_bytes,omitempty"`
	// Strategy, GPUs and Sharding describe data parallelism; the figures
	// are one rank's.
	Strategy        string `json:"strategy,omitempty"`
	GPUs            int    `json:"gpus,omitempty"`
	Sharding        string `json:"sharding,omitempty"`
	GradBucketBytes int64  `json:"grad_bucket_bytes,omitempty"`
	TP              int64  `json:"tp,omitempty"`
	PP              int64  `json:"pp,omitempty"`
	Stage           int64  `json:"stage,omitempty"`
	// Stages are every pipeline stage's figures (when no stage was
	// named, the rest of the answer is the stage that fits worst).
	Stages             []StageJSON `json:"stages,omitempty"`
	OffloadedHostBytes int64       `json:"offloaded_host_bytes,omitempty"`
	// Quantization describes the quantized Linear weights' format and
	// QuantizedBytes what they store (part of parameters_bytes).
	Quantization       string `json:"quantization,omitempty"`
	QuantizedBytes     int64  `json:"quantized_bytes"`
	ActivationsBytes   int64  `json:"activations_bytes"`
	AutocastCacheBytes int64  `json:"autocast_cache_bytes"`
	BatchDataBytes     int64  `json:"batch_data_bytes"`
	WorkspaceBytes     int64  `json:"workspace_bytes"`
	// ConvWorkspaceBytes is the largest cuDNN convolution workspace (the
	// release's figure: train/conv_cudnn.go) and CudnnSearches the
	// benchmark searches run.
	ConvWorkspaceBytes int64            `json:"conv_workspace_bytes,omitempty"`
	CudnnSearches      int              `json:"cudnn_searches,omitempty"`
	AtPeak             map[string]int64 `json:"at_peak_bytes"`
	PeakAllocatedBytes int64            `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64            `json:"peak_reserved_bytes"`
	ContextBytes       int64            `json:"cuda_context_bytes"`
	// NCCLBuffersBytes is the upper bound of NCCL's communicator buffers,
	// part of cuda_context_bytes; absent on one GPU.
	NCCLBuffersBytes int64 `json:"nccl_buffers_bytes,omitempty"`
	DeviceTotalBytes int64 `json:"device_total_bytes"`
	GPUCapacityBytes int64 `json:"gpu_capacity_bytes"`
	// GPUSMITotalBytes is nvidia-smi's total, beside the capacity PyTorch
	// can use (gpu_capacity_bytes), which decides the fit.
	GPUSMITotalBytes int64 `json:"gpu_nvidia_smi_total_bytes,omitempty"`
	HeadroomBytes    int64 `json:"headroom_bytes"`
	// MarginBytes is the headroom fits required (maxbatch, plan and
	// sweep's --margin); absent for the bare figure.
	MarginBytes int64     `json:"margin_bytes,omitempty"`
	Band        *BandJSON `json:"band,omitempty"`
	Fits        bool      `json:"fits"`
	DecidedBy   string    `json:"decided_by"`
	OOM         string    `json:"oom_message,omitempty"`
	// NeedsAtLeast is set with OOM: the peak figures above are the
	// allocator's at the failure; this is what the step needs (its
	// requested peak plus the context, a lower bound).
	NeedsAtLeast int64      `json:"needs_at_least_bytes,omitempty"`
	Steps        []StepJSON `json:"steps,omitempty"`
	Time         *TimeJSON  `json:"time,omitempty"`
	// Mode is eval or generate for inference (absent for training), and
	// Generation a generation's cache figures.
	Mode       string          `json:"mode,omitempty"`
	Generation *GenerationJSON `json:"generation,omitempty"`
	// Suggestions are the smallest changes that fit, for a job that does
	// not.
	Suggestions []PlanEntryJSON `json:"suggestions,omitempty"`
	// SameGPUsPlan is the best of them that takes as many GPUs as the
	// job, as plan's same_gpus_plan, whether or not among Suggestions.
	SameGPUsPlan *PlanEntryJSON `json:"same_gpus_plan,omitempty"`
	// SuggestionsError says why there are none, when the planner could
	// not run.
	SuggestionsError string `json:"suggestions_error,omitempty"`
	// LargerGPUs are, when no change fits on the GPU, the larger catalog
	// GPUs on which a plan was simulated and fits, smallest first;
	// LargerSearched every larger GPU searched.
	LargerGPUs     []LargerGPUJSON `json:"larger_gpus,omitempty"`
	LargerSearched []string        `json:"larger_gpus_searched,omitempty"`
	// Notes are the prediction's caveats (predict.Note), the same as the
	// text output's "note: …" lines; an empty list when there are none.
	Notes []NoteJSON `json:"notes"`
}

// NoteJSON is one caveat of a prediction: Code is a stable kebab-case id,
// Text the caveat in words.
type NoteJSON struct {
	Code string `json:"code"`
	Text string `json:"text"`
}

// notesJSON is a prediction's notes, never null.
func notesJSON(res *predict.Result) []NoteJSON {
	out := []NoteJSON{}
	for _, n := range res.Notes {
		out = append(out, NoteJSON{Code: n.Code, Text: n.Text})
	}
	return out
}

// TimeJSON is the step-time model's prediction for one optimizer step.
type TimeJSON struct {
	StepSeconds      float64            `json:"step_seconds"`
	PartSeconds      map[string]float64 `json:"part_seconds"`
	SamplesPerSecond float64            `json:"samples_per_second"`
	TokensPerSecond  float64            `json:"tokens_per_second,omitempty"`
	MFU              float64            `json:"mfu"`
	ModelFLOPs       float64            `json:"model_flops"`
	FLOPs            float64            `json:"flops"`
	Bytes            float64            `json:"bytes_moved"`
	Kernels          int64              `json:"kernels"`
	// LoopSeconds is the training loop's own work (--loop-overhead for
	// each micro-batch), part of StepSeconds.
	LoopSeconds float64 `json:"loop_seconds,omitempty"`
	// Bound is the roofline bound: every kernel at the datasheet's peaks.
	Bound BoundJSON `json:"bound"`
	// Comm is the communication under parallelism (part of
	// StepSeconds: its exposed part and the pipeline bubble).
	Comm *CommJSON `json:"communication,omitempty"`
}

// BoundJSON is the roofline bound of a step.
type BoundJSON struct {
	StepSeconds      float64            `json:"step_seconds"`
	PartSeconds      map[string]float64 `json:"part_seconds"`
	SamplesPerSecond float64            `json:"samples_per_second"`
	MFU              float64            `json:"mfu"`
}

// CommJSON is cost.Comm.
type CommJSON struct {
	Seconds        float64 `json:"seconds"`
	ExposedSeconds float64 `json:"exposed_seconds"`
	BubbleSeconds  float64 `json:"bubble_seconds,omitempty"`
	DataSeconds    float64 `json:"data_parallel_seconds,omitempty"`
	TensorSeconds  float64 `json:"tensor_parallel_seconds,omitempty"`
	PipeSeconds    float64 `json:"pipeline_send_seconds,omitempty"`
	Bytes          float64 `json:"bytes"`
	Collectives    int64   `json:"collectives"`
}

func timeJSON(res *predict.Result) *TimeJSON {
	e := res.Time
	if e == nil {
		return nil
	}
	t := &TimeJSON{StepSeconds: e.Seconds, PartSeconds: map[string]float64{}, SamplesPerSecond: e.SamplesPerSecond(),
		TokensPerSecond: e.TokensPerSecond(), MFU: e.MFU, ModelFLOPs: e.ModelFLOPs, FLOPs: e.FLOPs, Bytes: e.Bytes, Kernels: e.Kernels, LoopSeconds: e.Loop}
	t.Bound = BoundJSON{StepSeconds: e.Bound.Seconds, PartSeconds: map[string]float64{}, SamplesPerSecond: e.BoundSamplesPerSecond(), MFU: e.Bound.MFU}
	for _, p := range cost.Parts() {
		t.PartSeconds[p.String()] = e.By[p]
		t.Bound.PartSeconds[p.String()] = e.Bound.By[p]
	}
	if c := res.Comm; c != nil {
		t.Comm = &CommJSON{Seconds: c.Seconds, ExposedSeconds: c.Exposed, BubbleSeconds: c.Bubble, DataSeconds: c.Data,
			TensorSeconds: c.Tensor, PipeSeconds: c.Pipeline, Bytes: c.Bytes, Collectives: c.Collectives}
	}
	return t
}

// StepJSON is one step of a schedule. The end figures are at the step's
// end, before any empty_cache(); nvidia-smi shows reserved plus the CUDA
// context. ReleasedBytes is what empty_cache() returned during the step
// and right after it (the call after the last step included); the
// after-empty-cache figures are set only when empty_cache() followed it.
type StepJSON struct {
	Step                int    `json:"step"`
	Batch               int64  `json:"batch"`
	PeakAllocatedBytes  int64  `json:"peak_allocated_bytes"`
	PeakReservedBytes   int64  `json:"peak_reserved_bytes"`
	EndAllocatedBytes   int64  `json:"end_allocated_bytes"`
	EndReservedBytes    int64  `json:"end_reserved_bytes"`
	EndNvidiaSMIBytes   int64  `json:"end_nvidia_smi_bytes"`
	EmptyCacheAfter     bool   `json:"empty_cache_after"`
	ReleasedBytes       int64  `json:"released_bytes"`
	ReservedAfterBytes  *int64 `json:"reserved_after_empty_cache_bytes,omitempty"`
	NvidiaSMIAfterBytes *int64 `json:"nvidia_smi_after_empty_cache_bytes,omitempty"`
}

// NewEstimate is the view of a prediction; batches, when more than one, are
// a schedule's, whose every step it lists.
func NewEstimate(res *predict.Result, batches []int64) EstimateJSON {
	s := res.Summary
	tl := res.Timeline
	out := EstimateJSON{Model: res.Model, SourceNote: res.Note, Batch: res.Config.Batch, Seq: res.Config.Seq, GPU: res.GPU.Name,
		Precision: string(res.Setup.Precision), Optimizer: res.Setup.Optimizer.Name(), OptimizerImpl: string(res.Setup.Optimizer.Impl),
		Accumulate: res.Setup.Accumulate, Checkpointing: res.Setup.Checkpoint.On(), Checkpoint: res.Setup.Checkpoint.String(), TorchProfile: res.Setup.Profile.Version,
		ParamCount: s.ParamCount, TrainableParamCount: s.TrainableParamCount, ParametersBytes: s.ParametersBytes, BuffersBytes: s.BuffersBytes, GradientsBytes: s.GradientsBytes,
		OptimizerStateBytes: s.OptimizerStateBytes, PagedOptimizerStateBytes: s.PagedOptimizerStateBytes, ActivationsBytes: s.ActivationsBytes, AutocastCacheBytes: s.CastCacheBytes,
		BatchDataBytes: s.BatchDataBytes, WorkspaceBytes: s.WorkspaceBytes, AtPeak: map[string]int64{},
		PeakAllocatedBytes: tl.PeakAllocated, PeakReservedBytes: tl.PeakReserved, ContextBytes: res.Context, NCCLBuffersBytes: res.NCCL,
		DeviceTotalBytes: res.DeviceTotal, GPUCapacityBytes: res.GPU.Capacity, HeadroomBytes: res.Headroom(), Fits: res.Fits, DecidedBy: res.Decider}
	for _, c := range trace.Categories() {
		if c == trace.KVCache && tl.AtPeak[c] == 0 && res.Generation == nil {
			continue // only a generation has a cache: training's keys stay as they were
		}
		out.AtPeak[c.String()] = tl.AtPeak[c]
	}
	if c := res.Config; c.TP > 1 || c.PP > 1 {
		out.TP, out.PP, out.Stage = c.TP, c.PP, c.Stage
		for _, st := range res.Stages {
			out.Stages = append(out.Stages, StageJSON{Stage: st.Stage, ParamCount: st.Params, PeakAllocatedBytes: st.PeakAllocated,
				PeakReservedBytes: st.PeakReserved, DeviceTotalBytes: st.DeviceTotal, Fits: st.Fits})
		}
	}
	if p := res.Setup.Parallel; p.On() {
		out.Strategy, out.GPUs, out.GradBucketBytes, out.OffloadedHostBytes = string(p.Strategy), p.GPUs, s.GradBucketBytes, s.OffloadedBytes
		if p.IsFSDP() {
			out.Sharding = string(p.Sharding)
		}
	}
	if q := res.Config.Quant; q != nil {
		out.Quantization, out.QuantizedBytes = q.String(), s.QuantizedBytes
	}
	out.ConvWorkspaceBytes, out.CudnnSearches = s.ConvWorkspaceBytes, s.CudnnSearches
	if tl.OOM != nil {
		out.OOM = tl.OOM.Error()
		out.NeedsAtLeast = plan.Need(res)
	}
	out.Time = timeJSON(res)
	out.Notes = notesJSON(res)
	out.GPUSMITotalBytes, out.MarginBytes = res.GPU.SMITotal, res.Margin
	if tl.OOM == nil {
		out.Band = bandJSON(res)
	}
	if res.Infer != nil {
		out.Mode = string(res.Infer.Mode)
		out.Generation = generationFigures(res)
	}
	if len(batches) > 1 {
		for i, st := range tl.Steps {
			if i >= len(batches) {
				break
			}
			sj := StepJSON{Step: i + 1, Batch: batches[i], PeakAllocatedBytes: st.PeakAllocated, PeakReservedBytes: st.PeakReserved,
				EndAllocatedBytes: st.EndAllocated, EndReservedBytes: st.EndReserved, EndNvidiaSMIBytes: st.EndReserved + res.Context,
				EmptyCacheAfter: st.EmptiedAfter, ReleasedBytes: st.Released}
			if st.EmptiedAfter {
				after, smi := st.ReservedAfter, st.ReservedAfter+res.Context
				sj.ReservedAfterBytes, sj.NvidiaSMIAfterBytes = &after, &smi
			}
			out.Steps = append(out.Steps, sj)
		}
	}
	return out
}

// BandJSON is the safety band and what it means for this prediction.
type BandJSON struct {
	Under  float64 `json:"under"`
	Over   float64 `json:"over"`
	Cases  int     `json:"cases"`
	Source string  `json:"source"`
	// Group is what the predictions the band was measured on rely on
	// (empty: the band of all of them), Limits the batches that ran out of
	// memory among its evidence.
	Group  string `json:"group,omitempty"`
	Limits int    `json:"limits,omitempty"`
	// Text is the band as every output words it.
	Text string `json:"text"`
	// DeviceTotalHighBytes is the real device total the band allows:
	// the prediction over 1 − under.
	DeviceTotalHighBytes int64 `json:"device_total_high_bytes"`
	FitsWithBand         bool  `json:"fits_with_band"`
}

func bandJSON(res *predict.Result) *BandJSON {
	b := res.Band
	high := int64(math.Ceil(float64(res.DeviceTotal) / (1 - b.Under)))
	return &BandJSON{Under: b.Under, Over: b.Over, Cases: b.Cases, Source: b.Source, Group: b.Group, Limits: b.Limits, Text: b.String(), DeviceTotalHighBytes: high, FitsWithBand: high <= res.GPU.Capacity}
}

// StageJSON is one pipeline stage's figures.
type StageJSON struct {
	Stage              int64 `json:"stage"`
	ParamCount         int64 `json:"param_count"`
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	DeviceTotalBytes   int64 `json:"device_total_bytes"`
	Fits               bool  `json:"fits"`
}
