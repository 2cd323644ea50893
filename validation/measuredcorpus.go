package validation

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// The project's own GPU measurements (testdata/measured, made by
// validation/measure.py) enter the GPU corpus as cases like any other
// source's, so that the corpus's accuracy test, the bands and the
// largest-batch checks hold batchfit to them too. MeasuredCorpusCases
// writes one case per measured result: the 'batchfit estimate' command
// line of the same job (the flags that give validate's Request) and the
// measured peaks; a largest-batch search (measure.py --maxbatch) adds a
// case with the largest batch that ran and the first that failed.

// OwnSource says where a measured file lives in this repository.
type OwnSource struct {
	// Commit is the commit that added the file, Path its path.
	Commit, Path string
	// GPU is the catalog name of the GPU it ran on, Prefix the case ids'
	// prefix ("own-h200").
	GPU, Prefix string
}

// MaxBatchFile is what measure.py --maxbatch writes.
type MaxBatchFile struct {
	Environment *Environment `json:"environment"`
	MaxBatch    []struct {
		ID          string       `json:"id"`
		Case        MeasuredCase `json:"case"`
		MaxBatch    int64        `json:"max_batch"`
		SmallestOOM int64        `json:"smallest_oom"`
		Error       *string      `json:"error"`
		Trials      []struct {
			Batch   int64  `json:"batch"`
			Status  string `json:"status"`
			Context *struct {
				Bytes int64 `json:"context_bytes"`
			} `json:"context"`
		} `json:"trials"`
	} `json:"maxbatch"`
}

// LoadMaxBatch reads a measure.py --maxbatch file.
func LoadMaxBatch(path string) (*MaxBatchFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading largest batches: %w", err)
	}
	var f MaxBatchFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: not a measure.py --maxbatch file: %w", path, err)
	}
	return &f, nil
}

// measuredPrecisions are measure.py's precisions as Lightning's names,
// which --precision takes.
var measuredPrecisions = map[string]string{"fp32": "32-true", "amp_bf16": "bf16-mixed", "amp_fp16": "16-mixed", "bf16": "bf16-true", "fp16": "16-true"}

// torchProfile is the profile that applies to a measured torch version
// (profile.Lookup: the newest not newer than it), by its version.
func torchProfile(version string) (string, error) {
	p, err := profile.Lookup(version)
	if err != nil {
		return "", err
	}
	return p.Version, nil
}

// MeasuredArgs is the 'batchfit estimate' command line of a measured
// case: the job validate's Request predicts, on the catalog's GPU, with
// the measured CUDA context (bytes; 0 leaves the catalog's).
func MeasuredArgs(c MeasuredCase, gpuName string, env Environment, context int64) ([]string, error) {
	if len(c.Batches) > 0 {
		return nil, fmt.Errorf("a batch schedule has no command line")
	}
	if c.Model == "hf_config" {
		// the corpus's model files are its own (ResolvedArgs); a
		// repository config.json is not one of them
		return nil, fmt.Errorf("an hf_config case (%s) has no corpus command line", c.HFConfig)
	}
	prof, err := torchProfile(env.Torch)
	if err != nil {
		return nil, err
	}
	name, cfg := ZooModel(c.Model, c.Batch)
	args := []string{name, "--gpu", gpuName, "--batch", strconv.FormatInt(c.Batch, 10), "--torch", prof}
	if cfg.Layers > 0 {
		args = append(args, "--layers", strconv.FormatInt(cfg.Layers, 10))
	}
	if cfg.Hidden > 0 {
		args = append(args, "--hidden", strconv.FormatInt(cfg.Hidden, 10))
	}
	if a := cfg.Adapters; a != nil {
		args = append(args, "--lora", strconv.FormatInt(a.Rank, 10), "--lora-alpha", strconv.FormatFloat(a.Alpha, 'g', -1, 64),
			"--lora-targets", strings.Join(a.Targets, ","))
		// reference.py's LoRA Linear is plain PyTorch cast with the model
		// (model.to(bfloat16)): its adapters take the base's dtype, as
		// PEFT's did before 0.12's autocast_adapter_dtype
		args = append(args, "--peft-version", "0.11")
		if a.Dropout > 0 {
			args = append(args, "--lora-dropout", strconv.FormatFloat(a.Dropout, 'g', -1, 64))
		}
	}
	// measure.py's cases carry seq_len for every model (its default); only
	// its language model reads it
	if c.Model == "gpt2" {
		if c.SeqLen > 0 {
			args = append(args, "--seq", strconv.FormatInt(c.SeqLen, 10))
		}
		// Trainer.loss: the model called without labels, F.cross_entropy
		// of its logits; and the modeling code of the release it imported
		args = append(args, "--loss-from-logits")
		if env.Transformers != "" && models.CheckTransformersRelease(env.Transformers) == nil {
			args = append(args, "--transformers", env.Transformers)
		}
	}
	prec := "32-true"
	if c.Precision != "" {
		p, ok := measuredPrecisions[c.Precision]
		if !ok {
			return nil, fmt.Errorf("unknown precision %q", c.Precision)
		}
		prec = p
	}
	args = append(args, "--precision", prec)
	switch c.Optimizer {
	case "sgd":
		args = append(args, "--optimizer", "sgd")
	case "sgd_momentum":
		args = append(args, "--optimizer", "sgd", "--momentum", "0.9")
	case "adam":
		args = append(args, "--optimizer", "adam")
	case "adamw", "":
		args = append(args, "--optimizer", "adamw", "--weight-decay", "0.01")
	default:
		return nil, fmt.Errorf("unknown optimizer %q", c.Optimizer)
	}
	switch {
	case c.Fused != nil && *c.Fused:
		args = append(args, "--fused")
	case c.Foreach != nil && *c.Foreach:
		args = append(args, "--foreach")
	case c.Foreach != nil:
		args = append(args, "--forloop")
	}
	att, err := measuredAttention(c)
	if err != nil {
		return nil, err
	}
	if att != train.AttentionAuto {
		args = append(args, "--attention", string(att))
	}
	if c.Checkpoint {
		args = append(args, "--checkpoint", "full")
	}
	if c.Accum > 1 {
		args = append(args, "--accumulate", strconv.Itoa(c.Accum))
	}
	steps := c.Steps
	if steps == 0 {
		steps = 3
	}
	args = append(args, "--steps", strconv.Itoa(steps))
	if c.EmptyCache {
		args = append(args, "--empty-cache")
	}
	if c.CudnnBenchmark {
		args = append(args, "--cudnn-benchmark")
	}
	// validate's Request reads only the allocator's settings of the
	// case's environment; the command line gives them as a flag, so no
	// environment variable of the machine that reads it counts
	args = append(args, "--alloc-conf", c.Env["PYTORCH_CUDA_ALLOC_CONF"])
	if context > 0 {
		args = append(args, "--context", strconv.FormatInt(context, 10))
	}
	return args, nil
}

// caseID turns a measure.py id into a corpus id (lower case and dashes).
func caseID(prefix, id string) string {
	id = strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(id))
	return prefix + "-" + id
}

// Causes is a file of what was found about measured results that
// batchfit under-predicts by more than the corpus allows without a named
// cause: per measure.py id, a known cause (KnownCauses) the case names, or
// an under-prediction left unexplained, with what was checked. An
// unexplained result is not made a case: the corpus holds a case more than
// 5 % low only with its cause; the test that reads the file holds each such
// result to being still that low and within its group's band.
type Causes map[string]struct {
	KnownCause  string `json:"known_cause,omitempty"`
	Unexplained bool   `json:"unexplained,omitempty"`
	Why         string `json:"why"`
}

// LoadCauses reads a causes file.
func LoadCauses(path string) (Causes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading causes: %w", err)
	}
	var c Causes
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for id, v := range c {
		if (v.KnownCause == "") == !v.Unexplained || v.Why == "" {
			return nil, fmt.Errorf("%s: %s: want a known_cause or unexplained, and why", path, id)
		}
		if v.KnownCause != "" {
			if _, ok := KnownCauses[v.KnownCause]; !ok {
				return nil, fmt.Errorf("%s: %s: %q is not a known cause (%s)", path, id, v.KnownCause, knownCauseNames())
			}
		}
	}
	return c, nil
}

// MaxBatchSource is a largest-batch file with where the cases cite it:
// its path and the commit that added it (empty: the OwnSource's).
type MaxBatchSource struct {
	File         *MaxBatchFile
	Path, Commit string
}

// MeasuredCorpusCases makes the corpus cases of a measured file (may be
// nil) and of largest-batch files, with the causes found (may be nil).
// Results measured with a batch schedule are left out (a command line
// has one batch), and so are the unexplained ones.
func MeasuredCorpusCases(m *Measurements, mbs []MaxBatchSource, causes Causes, src OwnSource) ([]GPUCase, error) {
	var out []GPUCase
	env := func(e *Environment) GPUEnv {
		if e == nil {
			return GPUEnv{}
		}
		return GPUEnv{GPU: e.GPUName, Torch: e.Torch}
	}
	base := func(path, quote string) GPUSource {
		return GPUSource{Repo: "batchfit/batchfit", Commit: src.Commit, Path: path, Licence: "Apache-2.0", Quote: quote}
	}
	cited := func(m MaxBatchSource, quote string) GPUSource {
		g := base(m.Path, quote)
		if m.Commit != "" {
			g.Commit = m.Commit
		}
		return g
	}
	if m != nil {
		for _, r := range m.Results {
			if r.Status != "ok" || len(r.Case.Batches) > 0 || causes[r.ID].Unexplained {
				continue
			}
			e := r.Env
			if e == nil {
				e = m.Environment
			}
			if e == nil {
				return nil, fmt.Errorf("%s: no environment recorded", r.ID)
			}
			args, err := MeasuredArgs(r.Case, src.GPU, *e, TrainingContext(r))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.ID, err)
			}
			out = append(out, GPUCase{
				ID: caseID(src.Prefix, r.ID), Family: familyOf(r.Case.Model), Kind: "log",
				Source: base(src.Path, "results[id="+r.ID+"]"), Args: args, Env: env(e),
				Measured:   GPUMeasured{MaxMemoryAllocated: r.MaxMemoryAllocated, MaxMemoryReserved: r.MaxMemoryReserved},
				Resolution: 1, SetupKnown: true, Unstated: []string{}, KnownCause: causes[r.ID].KnownCause,
				Notes: "validation/measure.py case " + r.ID + " (validation/cases.json), measured by this project: every setting is the case's; torch.cuda.max_memory_allocated and max_memory_reserved over the whole run, exact bytes; the CUDA context is NVML's figure for the process less the allocator's (--context)" + whyOf(causes, r.ID),
			})
		}
	}
	for _, from := range mbs {
		mb := from.File
		if mb == nil {
			continue
		}
		for _, s := range mb.MaxBatch {
			if s.MaxBatch == 0 || s.SmallestOOM == 0 {
				continue
			}
			// measure.py --maxbatch keeps no context per trial; the
			// measured file of the same machine has it, for the same
			// model and precision (the kernels a step loads differ)
			var context int64
			if m != nil {
				for _, r := range m.Results {
					if r.Status == "ok" && r.Case.Model == s.Case.Model && r.Case.Precision == s.Case.Precision {
						context = max(context, TrainingContext(r))
					}
				}
				if context == 0 && len(m.Results) > 0 {
					context = TrainingContext(m.Results[0])
				}
			}
			for _, t := range s.Trials {
				if t.Context != nil && t.Context.Bytes > 0 {
					context = t.Context.Bytes
				}
			}
			var e Environment
			if mb.Environment != nil {
				e = *mb.Environment
			}
			c := s.Case
			c.Batch = s.MaxBatch
			args, err := MeasuredArgs(c, src.GPU, e, context)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.ID, err)
			}
			out = append(out, GPUCase{
				ID: caseID(src.Prefix, s.ID), Family: familyOf(c.Model), Kind: "log",
				Source: cited(from, "maxbatch[id="+s.ID+"]"), Args: args, Env: env(mb.Environment),
				Measured:   GPUMeasured{LargestBatch: s.MaxBatch, FirstOOMBatch: s.SmallestOOM},
				Resolution: 1, SetupKnown: true, Unstated: []string{},
				Notes: fmt.Sprintf("validation/measure.py --maxbatch, measured by this project: batch %d ran every step, %d ran out of memory (real CUDA out-of-memory errors, one fresh process per trial)", s.MaxBatch, s.SmallestOOM),
			})
		}
	}
	return out, nil
}

// TrainingContext is what a measured process held outside the allocator
// while it trained, the context a command line's --context means: NVML's
// per-process figure less memory_reserved after the last step, which has
// the kernels the step loaded (profile.LazyModules); the context after
// torch.cuda.init where no step recorded it.
func TrainingContext(r MeasuredResult) int64 {
	if n := len(r.Steps); n > 0 && r.Steps[n-1].NonAllocatorBytes > 0 {
		return r.Steps[n-1].NonAllocatorBytes
	}
	return r.Context.Bytes
}

// familyOf groups measure.py's models as the corpus's families do.
func familyOf(model string) string {
	switch {
	case strings.HasPrefix(model, "lora-"):
		return "lora-mlp"
	case strings.HasPrefix(model, "mlp"):
		return "mlp"
	case strings.HasPrefix(model, "resnet"):
		return "resnet"
	case strings.HasPrefix(model, "vit"):
		return "vit"
	}
	return strings.ReplaceAll(model, "_", "-")
}

// whyOf is what the causes file says of a result, as a sentence to append.
func whyOf(causes Causes, id string) string {
	if w := causes[id].Why; w != "" {
		return ". " + w
	}
	return ""
}
