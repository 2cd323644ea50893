package graph

import "fmt"

// Config and Dim live here, beside the Graph they size, so that every
// builder of a graph (the zoo, Hugging Face configs, the layer spec) shares
// one description of a model's dimensions without importing the zoo.

// Config is what a builder needs beyond the model's own definition.
type Config struct {
	Batch int64
	Seq   int64 // sequence length for sequence models; 0 = the model's default
	// Overrides of the model's own dimensions, 0 = the model's default. A
	// model lists the ones it honours in models.Model.Dims.
	Layers int64
	Hidden int64
	// Image side for vision models; 0 = the model's default.
	Image int64
	// Adapters freeze parameters and add LoRA adapters (nil: full
	// training); builders pass them to their Builder.
	Adapters *Adapters
	// Quant stores the Linear layers' weights quantized (nil: as
	// parameters of the precision's dtype); builders pass it to their
	// Builder.
	Quant *Quant
	// TP is the tensor-parallel degree: the graph is one rank's share of
	// Megatron-style column and row splits (0 or 1: none). SP adds
	// sequence parallelism to it.
	TP int64
	SP bool
	// PP is the number of pipeline stages and Stage this graph's (0 ≤
	// Stage < PP); StageLayers, when given, is each stage's number of
	// layers (an uneven split), otherwise the layers are split evenly with
	// the remainder on the first stages.
	PP, Stage   int64
	StageLayers []int64
	// Decode, when set, asks a decoder language model for one forward of
	// transformers' generate() instead of a training step: Seq tokens
	// (the prompt, or 1) for Batch rows, with a key/value cache.
	Decode *Decode
	// Transformers is the Hugging Face transformers release whose modeling
	// code runs the model ("4.39", "4.45.2"; "" = the current code): it
	// sets models.TransformerConfig.Version for the models that
	// models.BuildTransformer builds (the zoo's transformers models,
	// Hugging Face configs) and is ignored by the others.
	Transformers string
	// CPU builds the graph for PyTorch's CPU kernels where their structure
	// differs from the GPU's: a captured nn.LSTM, nn.GRU or nn.RNN keeps
	// the per-timestep ops aten::lstm (and its kin) runs on the CPU instead
	// of becoming cuDNN's one call (Kind RNN). The CPU cross-checks set it
	// with train.Setup.CPU; every prediction for a GPU leaves it off.
	CPU bool
	// LossFromLogits: the training loop calls a causal language model
	// without labels and computes the loss itself from the logits the
	// model returns, F.cross_entropy(logits.view(-1, V), labels.reshape(-1))
	// with labels = F.pad(ids[:, 1:], (0, 1), value=-100), with no float
	// upcast of its own (validation/measure.py's Trainer.loss); the
	// default is the model's own loss (labels passed to forward).
	LossFromLogits bool
	// NoCache: the model runs with use_cache off, as transformers'
	// gradient checkpointing turns it in training (GPT2Model.forward,
	// T5Stack.forward: "`use_cache=True` is incompatible with gradient
	// checkpointing"), so its output holds no past_key_values and each
	// layer's keys and values go when the layer is done with them. A
	// captured model (recorded with the config's use_cache, on by default
	// in training) then releases them there; builders by name model no
	// cache in training and ignore it.
	NoCache bool
	// LibraryCheckpointing: the model runs under its library's gradient
	// checkpointing in training (train.Checkpoint.Library).
	// transformers' gradient_checkpointing_enable sets
	// gradient_checkpointing = True on every module that has the
	// attribute (modeling_utils.py, _set_gradient_checkpointing), and
	// some modules' forwards branch on it: T5Attention and the attentions
	// copied from it (MT5, LongT5's, Switch Transformers', UDOP's,
	// Pix2Struct's, Pop2Piano's) make the zero position bias of an
	// attention without a relative_attention_bias a leaf that requires
	// grad ("if self.gradient_checkpointing and self.training:
	// position_bias.requires_grad = True", modeling_t5.py
	// T5Attention.forward), so that the reentrant checkpoint of the
	// layer that makes it has an output requiring grad (graph.Tensor.Leaf).
	LibraryCheckpointing bool
	// InnerBlocks: a captured model's checkpointed blocks are the
	// innermost of its nested repeated modules (a ConvNeXt's
	// stages.N.blocks.M), as timm's set_grad_checkpointing wraps them,
	// not the outermost (stages.N). Builders by name ignore it.
	InnerBlocks bool
	// MHAPackedInProjection builds nn.MultiheadAttention's self-attention
	// in-projection as the release of the profile
	// (profile.Profile.MHAPackedInProjection) runs it: one [3, L, B, E]
	// contiguous copy of the projection (2.x) instead of a copy per chunk
	// (1.13). Predictions set it from the profile.
	MHAPackedInProjection bool
}

// Decode describes one forward pass of generate().
type Decode struct {
	// Past is the number of positions in the cache before this forward.
	Past int64
	// StaticLen is a StaticCache's max_cache_len; 0 means a DynamicCache.
	StaticLen int64
	// LogSoftmax: beam search takes log_softmax of the next-token logits.
	LogSoftmax bool
}

// StageRange is the layers [lo, hi) of stage s of a model of n layers
// split over pp stages: StageLayers when given, otherwise evenly, the
// first n mod pp stages taking one more.
func (c Config) StageRange(n int64) (lo, hi int64, err error) {
	pp := max(c.PP, 1)
	if c.Stage < 0 || c.Stage >= pp {
		return 0, 0, fmt.Errorf("stage %d is outside 0…%d", c.Stage, pp-1)
	}
	if len(c.StageLayers) > 0 {
		if int64(len(c.StageLayers)) != pp {
			return 0, 0, fmt.Errorf("%d stage sizes given for %d stages", len(c.StageLayers), pp)
		}
		var sum int64
		for i, l := range c.StageLayers {
			// every stage holds at least one layer, as the even split
			// below requires (pp ≤ n): a stage of none has no block to
			// run, the split the pipeline libraries make never gives one
			if l < 1 {
				return 0, 0, fmt.Errorf("stage %d has %d layers: each pipeline stage holds at least one", i, l)
			}
			if int64(i) < c.Stage {
				lo += l
			}
			sum += l
		}
		if sum != n {
			return 0, 0, fmt.Errorf("the stage sizes add up to %d layers, the model has %d", sum, n)
		}
		return lo, lo + c.StageLayers[c.Stage], nil
	}
	if pp > n {
		return 0, 0, fmt.Errorf("%d pipeline stages for %d layers", pp, n)
	}
	per, rem := n/pp, n%pp
	for s := int64(0); s < c.Stage; s++ {
		lo += per
		if s < rem {
			lo++
		}
	}
	hi = lo + per
	if c.Stage < rem {
		hi++
	}
	return lo, hi, nil
}

// Dim names a dimension a solver may vary.
type Dim string

// The dimensions a model may let a solver vary (see models.Model.Dims).
const (
	DimBatch  Dim = "batch"
	DimSeq    Dim = "seq"
	DimLayers Dim = "layers"
	DimHidden Dim = "hidden"
)
