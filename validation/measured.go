package validation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"sort"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// Measurements is the file measure.py writes.
type Measurements struct {
	Schema      any              `json:"schema"`
	Environment *Environment     `json:"environment"`
	Results     []MeasuredResult `json:"results"`
}

// Environment is the machine a measurement ran on.
type Environment struct {
	GPUName           string `json:"gpu_name"`
	TotalMemory       int64  `json:"gpu_total_memory"`
	ComputeCapability string `json:"gpu_capability"` // "9.0"
	Torch             string `json:"torch"`
	// Transformers is the transformers release the run imported ("" when
	// it had none).
	Transformers string `json:"transformers"`
}

// MeasuredResult is one case of measure.py's output.
type MeasuredResult struct {
	ID                 string       `json:"id"`
	Case               MeasuredCase `json:"case"`
	Status             string       `json:"status"`
	MaxMemoryAllocated int64        `json:"max_memory_allocated"`
	MaxMemoryReserved  int64        `json:"max_memory_reserved"`
	Context            struct {
		Bytes int64 `json:"context_bytes"`
	} `json:"context"`
	Env   *Environment   `json:"env"`
	Steps []MeasuredStep `json:"steps"`
	// Model is what measure.py built: Kind "lm" is a causal language
	// model whose loss the loop computes from its logits (Trainer.loss).
	Model struct {
		Kind string `json:"kind"`
		// HFConfigJSON is the text of the config.json a model
		// "hf_config" case was built from, as measure.py read it: the
		// prediction is built from it, never from a path the file names.
		HFConfigJSON string `json:"hf_config_json"`
	} `json:"model"`
}

// MeasuredStep is one optimizer step of a case, timed between
// torch.cuda.synchronize calls.
type MeasuredStep struct {
	Step  int     `json:"step"`
	Batch int64   `json:"batch"`
	TimeS float64 `json:"time_s"`
	// NonAllocatorBytes is the process's device memory outside the
	// caching allocator after the step (NVML's figure for the process
	// minus memory_reserved): the CUDA context with the kernels and the
	// library handles the step loaded.
	NonAllocatorBytes int64 `json:"non_allocator_bytes"`
}

// StepSeconds is the measured time of a steady step: the median of the
// steps after the first (which pays for lazy initialisation, cuDNN's
// autotuning and the optimizer's state), or 0 when fewer than two steps
// ran at one batch size.
func (r MeasuredResult) StepSeconds() float64 {
	var ts []float64
	for i, st := range r.Steps {
		if i == 0 || st.TimeS <= 0 || st.Batch != r.Steps[0].Batch {
			continue
		}
		ts = append(ts, st.TimeS)
	}
	if len(ts) == 0 {
		return 0
	}
	return median(ts)
}

// MeasuredCase is a case of validation/cases.json with its defaults filled.
type MeasuredCase struct {
	Model      string  `json:"model"`
	Batch      int64   `json:"batch"`
	Batches    []int64 `json:"batches"`
	Steps      int     `json:"steps"`
	Precision  string  `json:"precision"`
	Optimizer  string  `json:"optimizer"`
	Foreach    *bool   `json:"foreach"`
	Fused      *bool   `json:"fused"`
	Checkpoint bool    `json:"checkpoint"`
	Accum      int     `json:"accum"`
	EmptyCache bool    `json:"empty_cache"`
	SeqLen     int64   `json:"seq_len"`
	Attention  string  `json:"attn_implementation"`
	// HFConfig is model "hf_config"'s config.json, a path relative to
	// the repository root (what the model's name and the recorded text
	// are read under).
	HFConfig string `json:"hf_config"`
	// SDPABackend is the torch.nn.attention.SDPBackend the forward and
	// the backward ran under (sdpa_kernel): math, efficient, flash or
	// cudnn; "" where PyTorch's dispatcher picked.
	SDPABackend string            `json:"sdpa_backend"`
	Env         map[string]string `json:"env"`
	// CudnnBenchmark is measure.py's torch.backends.cudnn.benchmark.
	CudnnBenchmark bool `json:"cudnn_benchmark"`
}

// UnmarshalJSON reads a case with measure.py's default accumulation
// (CASE_DEFAULTS' "accum": 1) where the file gives none, so that an
// "accum" of 0 written in the file is told apart from one left out.
func (c *MeasuredCase) UnmarshalJSON(b []byte) error {
	type plain MeasuredCase
	p := plain{Accum: 1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = MeasuredCase(p)
	return nil
}

// check refuses a result measure.py could not have written: its
// check_case requires positive batches, accum and steps, and the
// figures are torch.cuda.max_memory_allocated and max_memory_reserved,
// which count bytes (never negative) and of which the allocated part
// never exceeds the reserved (every allocated block lies in a reserved
// segment). Each refusal names the result and the field.
func (r MeasuredResult) check(i int) error {
	at := fmt.Sprintf("results[%d]", i)
	if r.ID != "" {
		at += fmt.Sprintf(" (%s)", r.ID)
	}
	c := r.Case
	for _, f := range []struct {
		name string
		v    int64
		min  int64
	}{{"case.accum", int64(c.Accum), 1}, {"case.batch", c.Batch, 0}, {"case.steps", int64(c.Steps), 0}, {"case.seq_len", c.SeqLen, 0},
		{"max_memory_allocated", r.MaxMemoryAllocated, 0}, {"max_memory_reserved", r.MaxMemoryReserved, 0},
		{"context.context_bytes", r.Context.Bytes, 0}} {
		if f.v < f.min {
			return fmt.Errorf("%s: %q is %d, want %d or more", at, f.name, f.v, f.min)
		}
	}
	for _, b := range c.Batches {
		if b < 1 {
			return fmt.Errorf("%s: \"case.batches\" holds %d, want batch sizes of 1 or more", at, b)
		}
	}
	if r.MaxMemoryAllocated > r.MaxMemoryReserved && r.MaxMemoryReserved > 0 {
		return fmt.Errorf("%s: \"max_memory_allocated\" %d is more than \"max_memory_reserved\" %d", at, r.MaxMemoryAllocated, r.MaxMemoryReserved)
	}
	for j, st := range r.Steps {
		if st.TimeS < 0 || st.Batch < 0 {
			return fmt.Errorf("%s: \"steps[%d]\" has batch %d and time %g s, want neither negative", at, j, st.Batch, st.TimeS)
		}
	}
	return nil
}

// maxFile bounds what Load reads.
const maxFile = 256 << 20

// Load reads a measure.py output file.
func Load(path string) (*Measurements, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading measurements: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxFile {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxFile>>20)
	}
	var m Measurements
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: not a measure.py result file: %w", path, err)
	}
	if len(m.Results) == 0 {
		return nil, fmt.Errorf("%s: no results (expected the \"results\" list measure.py writes)", path)
	}
	for i, r := range m.Results {
		if err := r.check(i); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return &m, nil
}

var precisions = map[string]train.Precision{"fp32": train.FP32, "amp_bf16": train.MixedBF16, "amp_fp16": train.Mixed16, "bf16": train.TrueBF16, "fp16": train.True16}

// Request maps a measured case to the prediction of the same job on the
// same machine: the GPU's reported capacity and compute capability, the
// measured CUDA context, the PyTorch version's profile.
func Request(r MeasuredResult, env *Environment) (predict.Request, error) {
	c := r.Case
	var q predict.Request
	if r.Env != nil {
		env = r.Env
	}
	if env == nil || env.TotalMemory <= 0 {
		return q, fmt.Errorf("case %s: no GPU environment recorded", r.ID)
	}
	name, cfg := ZooModel(c.Model, c.Batch)
	cfg.Seq = c.SeqLen
	byTransformers := false
	if c.Model == "hf_config" {
		m, err := hfConfigModel(r)
		if err != nil {
			return q, fmt.Errorf("case %s: %w", r.ID, err)
		}
		q.Source, byTransformers = m, true
	} else {
		m, err := models.Lookup(name)
		if err != nil {
			return q, fmt.Errorf("case %s: %w", r.ID, err)
		}
		q.Source, byTransformers = predict.Zoo{M: m}, m.Family == "transformers"
	}
	if r.Model.Kind == "lm" {
		// Trainer.loss calls the model without labels and takes
		// F.cross_entropy of the logits it returns.
		cfg.LossFromLogits = true
	}
	if byTransformers && env.Transformers != "" {
		// the modeling code of the release the run imported, where
		// batchfit follows it (the current code otherwise)
		if models.CheckTransformersRelease(env.Transformers) == nil {
			cfg.Transformers = env.Transformers
		}
	}
	q.Config = cfg
	if len(c.Batches) > 0 {
		q.Schedule = c.Batches
		q.Config.Batch = c.Batches[0]
	}
	prec, ok := precisions[c.Precision]
	if !ok && c.Precision != "" {
		return q, fmt.Errorf("case %s: unknown precision %q", r.ID, c.Precision)
	}
	if c.Precision == "" {
		prec = train.FP32
	}
	opt := train.Optimizer{}
	switch c.Optimizer {
	case "sgd":
		opt.Kind = train.SGD
	case "sgd_momentum":
		opt.Kind, opt.Momentum = train.SGD, 0.9
	case "adam":
		opt.Kind = train.Adam
	case "adamw", "":
		opt.Kind, opt.WeightDecay = train.AdamW, 0.01
	default:
		return q, fmt.Errorf("case %s: unknown optimizer %q", r.ID, c.Optimizer)
	}
	if c.Fused != nil && *c.Fused {
		opt.Impl = train.Fused
	} else if c.Foreach != nil {
		opt.Impl = train.ForLoop
		if *c.Foreach {
			opt.Impl = train.Foreach
		}
	}
	att, err := measuredAttention(c)
	if err != nil {
		return q, fmt.Errorf("case %s: %w", r.ID, err)
	}
	prof, err := profile.Lookup(env.Torch)
	if err != nil {
		return q, fmt.Errorf("case %s: %w", r.ID, err)
	}
	major := 9
	if env.ComputeCapability != "" {
		if _, err := fmt.Sscanf(env.ComputeCapability, "%d", &major); err != nil {
			return q, fmt.Errorf("case %s: compute capability %q", r.ID, env.ComputeCapability)
		}
	}
	steps := c.Steps
	if steps == 0 {
		steps = 3
	}
	var ck train.Checkpoint
	if c.Checkpoint {
		ck = train.FullCheckpoint
	}
	q.Setup = train.Setup{Precision: prec, Optimizer: opt, Accumulate: max(1, c.Accum), Checkpoint: ck,
		Attention: att, Steps: steps, EmptyCache: c.EmptyCache, CudnnBenchmark: c.CudnnBenchmark, Profile: prof}
	q.GPU = gpu.GPU{Name: env.GPUName, Marketing: env.GPUName, Capacity: env.TotalMemory, Major: major, ContextSize: r.Context.Bytes}
	q.Context = TrainingContext(r)
	ac, err := alloc.ParseConfig(c.Env["PYTORCH_CUDA_ALLOC_CONF"])
	if err != nil {
		return q, fmt.Errorf("case %s: %w", r.ID, err)
	}
	q.Alloc = ac
	return q, nil
}

// hfConfigModel opens the config.json of a model "hf_config" case as
// 'batchfit estimate path/config.json' does (hf.OpenFS), from the text
// measure.py recorded of it (model.hf_config_json) held under the case's
// path, so that the model takes the name of the config's directory. The
// path is never opened here: a measurement file is not trusted to name
// this machine's files.
func hfConfigModel(r MeasuredResult) (*hf.Model, error) {
	p := r.Case.HFConfig
	if p == "" || !fs.ValidPath(p) || path.Ext(p) != ".json" {
		return nil, fmt.Errorf("model \"hf_config\" needs hf_config, a config.json path relative to the repository root, got %q", p)
	}
	if r.Model.HFConfigJSON == "" {
		return nil, fmt.Errorf("hf_config %s: the result records no model.hf_config_json (the config's text, which measure.py writes)", p)
	}
	dir, base := path.Split(p)
	h := &hf.Headers{Dir: path.Clean(dir), Files: map[string]hf.HeaderFile{
		base: {Data: []byte(r.Model.HFConfigJSON), Size: int64(len(r.Model.HFConfigJSON))}}}
	m, err := hf.OpenFS(h, p)
	if err != nil {
		return nil, fmt.Errorf("hf_config %s: %w", p, err)
	}
	return m, nil
}

// measuredAttention is the kernel a case's attention ran: the backend
// measure.py pinned with torch.nn.attention.sdpa_kernel (the name
// --attention gives it), transformers' eager attention, or the
// dispatcher's choice (auto) for sdpa.
func measuredAttention(c MeasuredCase) (train.Attention, error) {
	if c.SDPABackend == "" {
		if c.Attention == "eager" {
			return train.AttentionEager, nil
		}
		return train.AttentionAuto, nil
	}
	if c.Attention == "eager" {
		return "", fmt.Errorf("sdpa_backend %q with attn_implementation \"eager\": eager attention calls no SDPA kernel", c.SDPABackend)
	}
	switch b := train.Attention(c.SDPABackend); b {
	case train.AttentionMath, train.AttentionEfficient, train.AttentionFlash, train.AttentionCudnn:
		return b, nil
	}
	return "", fmt.Errorf("unknown sdpa_backend %q (want math, efficient, flash or cudnn)", c.SDPABackend)
}

// Comparison is one case predicted and measured.
type Comparison struct {
	ID                                    string
	Status                                string
	PredictedAllocated, MeasuredAllocated int64
	PredictedReserved, MeasuredReserved   int64
	PredictedFits                         bool
	// PredictedSeconds and MeasuredSeconds are the step times, 0 where
	// either is unknown.
	PredictedSeconds, MeasuredSeconds float64
}

// ErrSeconds is (predicted − measured) / measured step time.
func (c Comparison) ErrSeconds() float64 {
	if c.MeasuredSeconds <= 0 || c.PredictedSeconds <= 0 {
		return math.NaN()
	}
	return (c.PredictedSeconds - c.MeasuredSeconds) / c.MeasuredSeconds
}

// ErrAllocated is (predicted − measured) / measured peak allocated.
func (c Comparison) ErrAllocated() float64 {
	return relErr(c.PredictedAllocated, c.MeasuredAllocated)
}

// ErrReserved is (predicted − measured) / measured peak reserved.
func (c Comparison) ErrReserved() float64 { return relErr(c.PredictedReserved, c.MeasuredReserved) }

func relErr(p, m int64) float64 {
	if m == 0 {
		return math.NaN()
	}
	return float64(p-m) / float64(m)
}

// Compare predicts every measured case that ran or ran out of memory.
func Compare(m *Measurements) ([]Comparison, error) {
	var out []Comparison
	for _, r := range m.Results {
		if r.Status != "ok" && r.Status != "oom" {
			continue
		}
		q, err := Request(r, m.Environment)
		if err != nil {
			return nil, err
		}
		res, err := predict.Run(context.Background(), q)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", r.ID, err)
		}
		c := Comparison{ID: r.ID, Status: r.Status, PredictedAllocated: res.Timeline.PeakAllocated,
			MeasuredAllocated: r.MaxMemoryAllocated, PredictedReserved: res.Timeline.PeakReserved,
			MeasuredReserved: r.MaxMemoryReserved, PredictedFits: res.Fits}
		if res.Time != nil && r.Status == "ok" {
			c.PredictedSeconds, c.MeasuredSeconds = res.Time.Seconds, r.StepSeconds()
		}
		out = append(out, c)
	}
	return out, nil
}

// Summary are the accuracy figures over the cases that ran.
type Summary struct {
	Cases                                       int
	MedianAbsErrAllocated, MedianAbsErrReserved float64
	// WorstUnderAllocated is the most negative allocated error (an
	// under-prediction is an OOM for the user).
	WorstUnderAllocated float64
	WorstUnderCase      string
	// OOMMissed counts measured OOMs the prediction said would fit.
	OOMMissed int
	// TimedCases have a predicted and a measured step time;
	// MedianAbsErrSeconds is over them. PairsOrdered is the share of
	// pairs of them, measured apart by more than 5 %, that the prediction
	// puts in the measured order: whether it ranks configurations right.
	TimedCases          int
	MedianAbsErrSeconds float64
	PairsOrdered        float64
}

// Summarize computes the accuracy figures of comparisons.
func Summarize(cs []Comparison) Summary {
	var s Summary
	var ea, er []float64
	for _, c := range cs {
		if c.Status == "oom" {
			if c.PredictedFits {
				s.OOMMissed++
			}
			continue
		}
		s.Cases++
		ea = append(ea, math.Abs(c.ErrAllocated()))
		er = append(er, math.Abs(c.ErrReserved()))
		if e := c.ErrAllocated(); e < s.WorstUnderAllocated {
			s.WorstUnderAllocated, s.WorstUnderCase = e, c.ID
		}
	}
	s.MedianAbsErrAllocated, s.MedianAbsErrReserved = median(ea), median(er)
	var et []float64
	var timed []Comparison
	for _, c := range cs {
		if e := c.ErrSeconds(); !math.IsNaN(e) {
			et = append(et, math.Abs(e))
			timed = append(timed, c)
		}
	}
	s.TimedCases, s.MedianAbsErrSeconds, s.PairsOrdered = len(timed), median(et), pairsOrdered(timed)
	return s
}

// pairsOrdered is the share of pairs whose measured times differ by more
// than 5 % that the predicted times order the same way (NaN without such
// pairs).
func pairsOrdered(cs []Comparison) float64 {
	var n, right int
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			a, b := cs[i], cs[j]
			if math.Abs(a.MeasuredSeconds-b.MeasuredSeconds) <= 0.05*math.Min(a.MeasuredSeconds, b.MeasuredSeconds) {
				continue
			}
			n++
			if (a.MeasuredSeconds < b.MeasuredSeconds) == (a.PredictedSeconds < b.PredictedSeconds) {
				right++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(right) / float64(n)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

// MarshalJSON writes the figures that are not numbers (no timed cases, no
// pair measured apart) as null: JSON has no NaN.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		plain
		MedianAbsErrAllocated *float64
		MedianAbsErrReserved  *float64
		WorstUnderAllocated   *float64
		MedianAbsErrSeconds   *float64
		PairsOrdered          *float64
	}{plain(s), num(s.MedianAbsErrAllocated), num(s.MedianAbsErrReserved), num(s.WorstUnderAllocated), num(s.MedianAbsErrSeconds), num(s.PairsOrdered)})
}

// ZooModel maps a model of validation/reference.py (which measure.py
// builds too) to the zoo entry and configuration batchfit predicts it
// with: the MLP variants by their depth and width, the LoRA MLPs with
// PEFT's adapters on every hidden Linear (named "linear"; the head is
// frozen).
func ZooModel(name string, batch int64) (string, models.Config) {
	switch name {
	case "mlp-L1-H256":
		return "mlp", models.Config{Batch: batch, Layers: 1, Hidden: 256}
	case "mlp-L8-H512":
		return "mlp", models.Config{Batch: batch, Layers: 8, Hidden: 512}
	case "lora-mlp-r8":
		return "mlp", models.Config{Batch: batch, Adapters: &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"linear"}}}
	case "lora-mlp-r16-dropout":
		return "mlp", models.Config{Batch: batch, Adapters: &graph.Adapters{Rank: 16, Alpha: 32, Dropout: 0.1, Targets: []string{"linear"}}}
	}
	return name, models.Config{Batch: batch}
}
