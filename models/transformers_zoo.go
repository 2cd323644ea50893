package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// hfModel is a zoo entry built by BuildTransformer from the published
// config.json of a Hugging Face checkpoint.
type hfModel struct {
	name, repo string // zoo name; Hugging Face repository the config comes from
	class      string // the transformers class whose parameters are counted
	// defaultSeq is the sequence length used when none is given: the
	// length the model was pretrained with (GPT-2, BERT, RoBERTa, OPT,
	// Pythia: the learned position table; Llama-2 4096; Llama-3 and 3.2
	// 8192, their pretraining context before long-context extension;
	// Mistral-7B-v0.1 8192, its training context; Qwen2.5 4096, the length
	// of its main pretraining stage; T5 512 for encoder and decoder). 0 for
	// ViT, whose sequence is its patches (the image side is
	// TransformerConfig.ImageSize, or Config.Image).
	defaultSeq int64
	tc         TransformerConfig
}

var hfZoo = []hfModel{
	{"gpt2", "openai-community/gpt2", "GPT2LMHeadModel", 1024, hfGPT2(768, 12, 12)},
	{"gpt2-medium", "openai-community/gpt2-medium", "GPT2LMHeadModel", 1024, hfGPT2(1024, 24, 16)},
	{"gpt2-large", "openai-community/gpt2-large", "GPT2LMHeadModel", 1024, hfGPT2(1280, 36, 20)},
	{"gpt2-xl", "openai-community/gpt2-xl", "GPT2LMHeadModel", 1024, hfGPT2(1600, 48, 25)},

	{"bert-base-uncased", "google-bert/bert-base-uncased", "BertForMaskedLM", 512, hfBERT(768, 12, 12, 3072)},
	{"bert-large-uncased", "google-bert/bert-large-uncased", "BertForMaskedLM", 512, hfBERT(1024, 24, 16, 4096)},
	{"roberta-base", "FacebookAI/roberta-base", "RobertaForMaskedLM", 512, TransformerConfig{
		Arch: "roberta", VocabSize: 50265, Hidden: 768, Layers: 12, Heads: 12, Intermediate: 3072,
		MaxPositions: 514, TypeVocabSize: 1, PadTokenID: 1, TieEmbeddings: true,
		Activation: "gelu", NormEps: 1e-5, DropoutP: 0.1, AttnDropoutP: 0.1,
	}},

	{"Llama-2-7b", "meta-llama/Llama-2-7b-hf", "LlamaForCausalLM", 4096,
		hfLlama("llama", 32000, 4096, 32, 32, 32, 0, 11008, 4096, 1e-5, false)},
	{"Llama-2-13b", "meta-llama/Llama-2-13b-hf", "LlamaForCausalLM", 4096,
		hfLlama("llama", 32000, 5120, 40, 40, 40, 0, 13824, 4096, 1e-5, false)},
	{"Llama-3-8B", "meta-llama/Meta-Llama-3-8B", "LlamaForCausalLM", 8192,
		hfLlama("llama", 128256, 4096, 32, 32, 8, 0, 14336, 8192, 1e-5, false)},
	{"Llama-3-70B", "meta-llama/Meta-Llama-3-70B", "LlamaForCausalLM", 8192,
		hfLlama("llama", 128256, 8192, 80, 64, 8, 0, 28672, 8192, 1e-5, false)},
	{"Llama-3.2-1B", "meta-llama/Llama-3.2-1B", "LlamaForCausalLM", 8192,
		hfLlama("llama", 128256, 2048, 16, 32, 8, 64, 8192, 131072, 1e-5, true)},
	{"Llama-3.2-3B", "meta-llama/Llama-3.2-3B", "LlamaForCausalLM", 8192,
		hfLlama("llama", 128256, 3072, 28, 24, 8, 128, 8192, 131072, 1e-5, true)},
	{"Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1", "MistralForCausalLM", 8192,
		hfWith(hfLlama("mistral", 32000, 4096, 32, 32, 8, 128, 14336, 32768, 1e-5, false), func(tc *TransformerConfig) {
			tc.SlidingWindow = 4096
		})},
	{"Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", "Qwen2ForCausalLM", 4096,
		hfQwen2(151936, 896, 24, 14, 2, 4864, 32768, true)},
	{"Qwen2.5-1.5B", "Qwen/Qwen2.5-1.5B", "Qwen2ForCausalLM", 4096,
		hfQwen2(151936, 1536, 28, 12, 2, 8960, 131072, true)},
	{"Qwen2.5-7B", "Qwen/Qwen2.5-7B", "Qwen2ForCausalLM", 4096,
		hfQwen2(152064, 3584, 28, 28, 4, 18944, 131072, false)},

	{"t5-small", "google-t5/t5-small", "T5ForConditionalGeneration", 512, hfT5(512, 6, 8, 2048)},
	{"t5-base", "google-t5/t5-base", "T5ForConditionalGeneration", 512, hfT5(768, 12, 12, 3072)},

	// One checkpoint for each of the other architectures.
	{"pythia-160m", "EleutherAI/pythia-160m", "GPTNeoXForCausalLM", 2048, TransformerConfig{
		Arch: "gpt_neox", VocabSize: 50304, Hidden: 768, Layers: 12, Heads: 12, Intermediate: 3072,
		MaxPositions: 2048, RotaryPct: 0.25, ParallelResidual: true, Activation: "gelu", NormEps: 1e-5,
	}},
	{"opt-125m", "facebook/opt-125m", "OPTForCausalLM", 2048, TransformerConfig{
		Arch: "opt", VocabSize: 50272, Hidden: 768, Layers: 12, Heads: 12, Intermediate: 3072,
		MaxPositions: 2048, TieEmbeddings: true, Activation: "relu", NormEps: 1e-5, DropoutP: 0.1,
	}},
	{"Phi-3-mini-4k", "microsoft/Phi-3-mini-4k-instruct", "Phi3ForCausalLM", 4096,
		hfWith(hfLlama("phi3", 32064, 3072, 32, 32, 32, 0, 8192, 4096, 1e-5, false), func(tc *TransformerConfig) {
			tc.SlidingWindow = 2047
		})},
	{"gemma-2b", "google/gemma-2b", "GemmaForCausalLM", 8192,
		hfWith(hfLlama("gemma", 256000, 2048, 18, 8, 1, 256, 16384, 8192, 1e-6, true), func(tc *TransformerConfig) {
			tc.Activation = "gelu_pytorch_tanh"
		})},

	// ViT-B/16 fine-tuned on ImageNet-1k at 224: 1000 labels (its
	// config.json's id2label).
	{"vit-base-patch16-224", "google/vit-base-patch16-224", "ViTForImageClassification", 0, TransformerConfig{
		Arch: "vit", Hidden: 768, Layers: 12, Heads: 12, Intermediate: 3072, QKVBias: true,
		ImageSize: 224, PatchSize: 16, NumChannels: 3, NumLabels: 1000,
		Activation: "gelu", NormEps: 1e-12,
	}},
}

func hfGPT2(embd, layers, heads int64) TransformerConfig {
	return TransformerConfig{
		Arch: "gpt2", VocabSize: 50257, Hidden: embd, Layers: layers, Heads: heads, MaxPositions: 1024,
		TieEmbeddings: true, Activation: "gelu_new", NormEps: 1e-5, DropoutP: 0.1, AttnDropoutP: 0.1,
	}
}

func hfBERT(hidden, layers, heads, inter int64) TransformerConfig {
	return TransformerConfig{
		Arch: "bert", VocabSize: 30522, Hidden: hidden, Layers: layers, Heads: heads, Intermediate: inter,
		MaxPositions: 512, TypeVocabSize: 2, TieEmbeddings: true,
		Activation: "gelu", NormEps: 1e-12, DropoutP: 0.1, AttnDropoutP: 0.1,
	}
}

func hfLlama(arch string, vocab, hidden, layers, heads, kv, headDim, inter, maxPos int64, eps float64, tie bool) TransformerConfig {
	return TransformerConfig{
		Arch: arch, VocabSize: vocab, Hidden: hidden, Layers: layers, Heads: heads, KVHeads: kv, HeadDim: headDim,
		Intermediate: inter, MaxPositions: maxPos, TieEmbeddings: tie, Activation: "silu", NormEps: eps,
	}
}

func hfQwen2(vocab, hidden, layers, heads, kv, inter, maxPos int64, tie bool) TransformerConfig {
	tc := hfLlama("qwen2", vocab, hidden, layers, heads, kv, 0, inter, maxPos, 1e-6, tie)
	tc.QKVBias = true
	return tc
}

func hfT5(dModel, layers, heads, dff int64) TransformerConfig {
	return TransformerConfig{
		Arch: "t5", VocabSize: 32128, Hidden: dModel, Layers: layers, Heads: heads, HeadDim: 64, Intermediate: dff,
		RelAttnBuckets: 32, RelAttnMaxDist: 128, FeedForwardProj: "relu", Activation: "relu",
		TieEmbeddings: true, NormEps: 1e-6, DropoutP: 0.1,
	}
}

func hfWith(tc TransformerConfig, f func(*TransformerConfig)) TransformerConfig {
	f(&tc)
	return tc
}

func init() {
	for _, m := range hfZoo {
		dims := []Dim{DimSeq, DimLayers, DimHidden}
		if hfArchs[m.tc.Arch].vision {
			dims = []Dim{DimLayers, DimHidden}
		}
		Register(Model{
			Name: m.name, Family: "transformers",
			Description: hfDescribe(m),
			DefaultSeq:  m.defaultSeq,
			Dims:        dims,
			Build: func(c Config) (*graph.Graph, error) {
				if c.Seq == 0 {
					c.Seq = m.defaultSeq
				}
				return BuildTransformer(m.name, m.tc, c)
			},
			Range: m.tc.Range,
		})
	}
}

func hfDescribe(m hfModel) string {
	tc := m.tc
	heads := fmt.Sprintf("%d heads", tc.Heads)
	if kv := tc.kvHeads(); kv != tc.Heads {
		heads = fmt.Sprintf("%d heads (%d kv)", tc.Heads, kv)
	}
	tie := ""
	if tc.TieEmbeddings {
		tie = ", tied embeddings"
	}
	layers := fmt.Sprintf("%d layers", tc.Layers)
	if hfArchs[tc.Arch].vision {
		return fmt.Sprintf("%s (%s): %s, hidden %d, %s, %d×%d patches at %d, %d labels",
			m.class, m.repo, layers, tc.Hidden, heads, tc.patchSize(), tc.patchSize(), tc.imageSize(), tc.numLabels())
	}
	if tc.Arch == "t5" {
		layers = fmt.Sprintf("%d+%d layers", tc.Layers, tc.Layers)
	}
	return fmt.Sprintf("%s (%s): %s, hidden %d, %s, vocab %d%s", m.class, m.repo, layers, tc.Hidden, heads, tc.VocabSize, tie)
}
