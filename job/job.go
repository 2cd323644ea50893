package job

import (
	"time"
)

// Job is one training (or inference) job as batchfit predicts it: the
// model, its sizes, how it is trained, the software's releases, the
// allocator's settings, adapters and quantization, parallelism and the
// GPU. Each field is one entry of Fields; its JSON name is the flag's.
// The zero Job is not a job: New gives one with every field at its
// default.
type Job struct {
	// the model and its sizes
	Model  string `json:"model,omitempty"`
	Batch  string `json:"batch,omitempty"`
	Seq    int64  `json:"seq,omitempty"`
	Layers int64  `json:"layers,omitempty"`
	Hidden int64  `json:"hidden,omitempty"`
	Image  int64  `json:"image,omitempty"`
	GPU    string `json:"gpu,omitempty"`
	Like   string `json:"like,omitempty"`

	// how it is trained
	Precision string  `json:"precision,omitempty"`
	Optimizer string  `json:"optimizer,omitempty"`
	Momentum  float64 `json:"momentum,omitempty"`
	// WeightDecay is nil where not given: torch.optim's default for the
	// optimizer (0, AdamW 0.01).
	WeightDecay   *float64 `json:"weight-decay,omitempty"`
	Foreach       bool     `json:"foreach,omitempty"`
	Fused         bool     `json:"fused,omitempty"`
	ForLoop       bool     `json:"forloop,omitempty"`
	AMSGrad       bool     `json:"amsgrad,omitempty"`
	Accumulate    int      `json:"accumulate,omitempty"`
	Checkpointing bool     `json:"checkpointing,omitempty"`
	// Checkpoint is "" where not given (none): an explicit "none" that
	// contradicts Checkpointing is refused, the default is not.
	Checkpoint         string        `json:"checkpoint,omitempty"`
	Attention          string        `json:"attention,omitempty"`
	Steps              int           `json:"steps,omitempty"`
	EmptyCache         bool          `json:"empty-cache,omitempty"`
	KeepOutput         bool          `json:"keep-output,omitempty"`
	LossFromLogits     bool          `json:"loss-from-logits,omitempty"`
	CudnnBenchmark     bool          `json:"cudnn-benchmark,omitempty"`
	NoAutocastCache    bool          `json:"no-autocast-cache,omitempty"`
	AutocastAroundLoop bool          `json:"autocast-around-loop,omitempty"`
	MemoryFormat       string        `json:"memory-format,omitempty"`
	LoopOverhead       time.Duration `json:"loop-overhead,omitempty"`

	// the software and the allocator
	Torch                 string `json:"torch,omitempty"`
	CUDA                  string `json:"cuda,omitempty"`
	Transformers          string `json:"transformers,omitempty"`
	AllocConf             string `json:"alloc-conf,omitempty"`
	CublasWorkspaceConfig string `json:"cublas-workspace-config,omitempty"`
	Context               string `json:"context,omitempty"`
	NCCLBuffsize          string `json:"nccl-buffsize,omitempty"`

	// adapters and quantization
	LoRA           int64   `json:"lora,omitempty"`
	LoRATargets    string  `json:"lora-targets,omitempty"`
	LoRAAlpha      float64 `json:"lora-alpha,omitempty"`
	LoRADropout    float64 `json:"lora-dropout,omitempty"`
	LoRAImpl       string  `json:"lora-impl,omitempty"`
	PeftVersion    string  `json:"peft-version,omitempty"`
	Freeze         string  `json:"freeze,omitempty"`
	Quant          string  `json:"quant,omitempty"`
	DoubleQuant    bool    `json:"double-quant,omitempty"`
	QuantCompute   string  `json:"quant-compute,omitempty"`
	QuantBlocksize int64   `json:"quant-blocksize,omitempty"`
	QuantVia       string  `json:"quant-via,omitempty"`
	BnbVersion     string  `json:"bnb-version,omitempty"`

	// inference
	Mode      string `json:"mode,omitempty"`
	Prompt    int64  `json:"prompt,omitempty"`
	NewTokens int64  `json:"new-tokens,omitempty"`
	Cache     string `json:"cache,omitempty"`
	Beams     int64  `json:"beams,omitempty"`

	// data parallelism
	GPUs           int     `json:"gpus,omitempty"`
	Strategy       string  `json:"strategy,omitempty"`
	Sharding       string  `json:"sharding,omitempty"`
	NodeGPUs       int     `json:"node-gpus,omitempty"`
	Offload        bool    `json:"offload,omitempty"`
	OffloadParams  bool    `json:"offload-params,omitempty"`
	NoSync         bool    `json:"no-sync,omitempty"`
	FSDPWrap       string  `json:"fsdp-wrap,omitempty"`
	FSDPLoad       string  `json:"fsdp-load,omitempty"`
	BucketMB       float64 `json:"bucket-mb,omitempty"`
	BucketView     bool    `json:"bucket-view,omitempty"`
	ReduceBucket   float64 `json:"reduce-bucket,omitempty"`
	PrefetchBucket float64 `json:"prefetch-bucket,omitempty"`

	// model parallelism
	TP          int64  `json:"tp,omitempty"`
	SP          bool   `json:"sp,omitempty"`
	PP          int64  `json:"pp,omitempty"`
	Stage       int64  `json:"stage,omitempty"`
	StageLayers string `json:"stage-layers,omitempty"`
}

// New is a job of command cmd with every field at its default (the
// command's own default where the table gives one, as --batch's).
func New(cmd string) Job {
	var j Job
	Fields.setDefaults(&j, cmd)
	return j
}
