package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// The Transformer language model of Stanford's CS336 (Language Modeling
// from Scratch), assignment 1's BasicsTransformerLM: a pre-norm decoder
// with RMSNorm (eps 1e-5), causal multi-head attention with RoPE (theta
// 10000), a SwiGLU feed-forward (w1, w3: d_model→d_ff, w2: d_ff→d_model),
// a final RMSNorm and an untied lm_head; no Linear has a bias. The sizes
// are the model-size table of the course's assignment 2 handout, with its
// vocabulary of 10,000; the sequence length is the model's context_length.
//
// Its parameters are those of a Llama of the same sizes (per layer
// 4·d² + 3·d·d_ff + 2·d, plus two vocab·d tables and the final norm), and
// it is built with the Llama modules. The course's code differs in what
// autograd keeps: it computes attention scores with einsum, masks them with
// torch.where, and takes softmax, SiLU (x·sigmoid(x)) and the loss's
// log-softmax with element-wise ops, each of which saves its own tensors
// for backward. Note says so with every prediction (CS336Note).
type cs336Size struct {
	name                    string
	dModel, dFF, layers, nh int64
}

var cs336Sizes = []cs336Size{
	{"small", 768, 3072, 12, 12},
	{"medium", 1024, 4096, 24, 16},
	{"large", 1280, 5120, 36, 20},
	{"xl", 1600, 6400, 48, 25},
	{"2.7b", 2560, 10240, 32, 32},
}

// CS336NoteID names the note of the CS336 models: the documented cause
// (docs/accuracy.md, section 11) of their under-predictions at long
// contexts.
const CS336NoteID = "cs336-hand-written-ops"

// CS336Note is printed with every prediction for a CS336 model.
const CS336Note = "note [" + CS336NoteID + "]: built with the Llama modules (the same parameters); the course's own attention, softmax, SiLU and cross-entropy are element-wise ops that keep more tensors for backward, which is not modelled: expect more memory than shown, most at long contexts"

// cs336DefaultSeq is the context length of the assignment's benchmarking
// script when none is given (its --context_length default).
const cs336DefaultSeq = 512

func init() {
	for _, s := range cs336Sizes {
		tc := hfLlama("llama", 10000, s.dModel, s.layers, s.nh, s.nh, 0, s.dFF, cs336DefaultSeq, 1e-5, false)
		// The scores are materialized, as eager attention does.
		tc.AttnImpl = "eager"
		name := "cs336-" + s.name
		Register(Model{
			Name: name, Family: "cs336",
			Description: fmt.Sprintf("CS336 BasicsTransformerLM %s: %d layers, d_model %d, d_ff %d, %d heads, vocab 10000, RoPE, SwiGLU, untied", s.name, s.layers, s.dModel, s.dFF, s.nh),
			DefaultSeq:  cs336DefaultSeq,
			Dims:        []Dim{DimSeq, DimLayers, DimHidden},
			Note:        CS336Note,
			Build: func(c Config) (*graph.Graph, error) {
				if c.Seq == 0 {
					c.Seq = cs336DefaultSeq
				}
				return BuildTransformer(name, tc, c)
			},
		})
	}
}
