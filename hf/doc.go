// Package hf reads Hugging Face models: a config.json, or a model
// directory with its safetensors weights, into the same Graph the zoo
// builds (models.BuildTransformer). A *Model is a predict.Source.
//
//	m, err := hf.Open("path/to/Llama-3.2-1B")   // or .../config.json
//	g, err := m.Build(models.Config{Batch: 8})  // Seq 0: m.DefaultSeq()
//
// # config.json
//
// LoadConfig (ParseConfig for bytes) reads the fields each configuration
// class of transformers defines, under transformers' names, and applies the
// class's defaults to optional ones. Sizes are required unless a default
// is listed; null counts as absent.
//
//	llama, mistral, qwen2, gemma, phi3 (LlamaConfig and its relatives):
//	  vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//	  num_attention_heads, max_position_embeddings;
//	  num_key_value_heads (num_attention_heads), head_dim
//	  (hidden_size/num_attention_heads; gemma 256), rms_norm_eps,
//	  tie_word_embeddings (false; gemma true), attention_dropout (0),
//	  torch_dtype (or dtype).
//	  llama: hidden_act (silu), attention_bias (false: q, k, v and o),
//	  mlp_bias (false). mistral: hidden_act, sliding_window (recorded).
//	  qwen2: q, k, v always with bias, o without; sliding_window when
//	  use_sliding_window. gemma: hidden_activation (null or absent:
//	  gelu_pytorch_tanh; hidden_act is ignored, as GemmaMLP does),
//	  attention_bias. phi3: hidden_act, resid_pdrop (the residual
//	  dropouts), embd_pdrop (checked, unused: the current Phi3Model has no
//	  embedding dropout), sliding_window, partial_rotary_factor (recorded
//	  with a note: the llama-family graph rotates whole heads).
//	gpt2 (GPT2Config): vocab_size, n_embd, n_layer, n_head, n_positions;
//	  n_inner (null: 4·n_embd), activation_function (gelu_new),
//	  resid_pdrop and embd_pdrop (0.1; the graph has one hidden dropout, so
//	  both must be zero or both non-zero), attn_pdrop (0.1),
//	  layer_norm_epsilon, tie_word_embeddings (true); add_cross_attention
//	  is refused.
//	gpt_neox (GPTNeoXConfig): vocab_size, hidden_size, num_hidden_layers,
//	  num_attention_heads, intermediate_size, max_position_embeddings;
//	  rotary_pct (or partial_rotary_factor; 0.25), use_parallel_residual
//	  (true), hidden_act (gelu), hidden_dropout, attention_dropout (0),
//	  layer_norm_eps, tie_word_embeddings (false); attention_bias false is
//	  refused.
//	opt (OPTConfig): vocab_size, hidden_size, num_hidden_layers,
//	  num_attention_heads, ffn_dim, max_position_embeddings;
//	  activation_function (relu), dropout (0.1), attention_dropout (0),
//	  tie_word_embeddings (true). Refused: word_embed_proj_dim ≠
//	  hidden_size, do_layer_norm_before false (opt-350m), enable_bias
//	  false, layer_norm_elementwise_affine false, _remove_final_layer_norm,
//	  activation_dropout > 0.
//	bert, roberta (BertConfig, RobertaConfig): vocab_size, hidden_size,
//	  num_hidden_layers, num_attention_heads, intermediate_size,
//	  max_position_embeddings; type_vocab_size (2), hidden_act (gelu),
//	  hidden_dropout_prob and attention_probs_dropout_prob (0.1),
//	  pad_token_id (bert 0, roberta 1: RoBERTa's positions start after
//	  it), layer_norm_eps, tie_word_embeddings (true). Refused:
//	  position_embedding_type other than absolute, is_decoder,
//	  add_cross_attention.
//	t5 (T5Config): vocab_size, d_model, d_kv, d_ff, num_layers, num_heads;
//	  num_decoder_layers (num_layers), relative_attention_num_buckets (32),
//	  relative_attention_max_distance (128), feed_forward_proj (relu;
//	  "gated-gelu" is T5 v1.1's gated gelu_new, other gated activations are
//	  refused), dropout_rate (0.1), layer_norm_epsilon,
//	  tie_word_embeddings (true), n_positions (512).
//	vit (ViTConfig; the graph is ViTForImageClassification): hidden_size,
//	  num_hidden_layers, num_attention_heads, intermediate_size; hidden_act
//	  (gelu), hidden_dropout_prob and attention_probs_dropout_prob (0.0),
//	  layer_norm_eps, image_size (224) and patch_size (16) as an integer or
//	  an equal [height, width] pair, num_channels (3), qkv_bias (true);
//	  the labels are len(id2label) when the config has one (a disagreeing
//	  num_labels is ignored with a note, as transformers does), else
//	  num_labels, else 2; problem_type (null: regression for one label,
//	  single-label classification otherwise). Refused: non-square images
//	  or patches, patches larger than the image or more than 1024 a side,
//	  an empty id2label or one whose keys are not integers, problem_type
//	  multi_label_classification (BCEWithLogitsLoss). encoder_stride,
//	  pooler_output_size and pooler_act configure modules the classifier
//	  has not and are not read.
//
// An unknown model_type gets the nearest supported one. Errors about a
// field are *FieldError values naming the file and the field: missing
// required sizes, wrong JSON types (a string for a size, 4096.0 for an
// integer), non-positive or absurd sizes, dropout outside [0, 1), hidden
// sizes not divisible by the heads (unless head_dim is given), key/value
// heads not dividing the heads. A converted config is built once before
// it is returned, so it always builds.
//
// # The class built
//
// architectures names the class the checkpoint was saved from, and the
// graph is that class (heads.go; models/transformers_heads.go for the
// modules): absent, or the language-model class (LlamaForCausalLM,
// BertForMaskedLM, GPT2LMHeadModel, T5ForConditionalGeneration,
// ViTForImageClassification, ...), it is the language model;
// BertForSequenceClassification, BertForTokenClassification,
// BertForQuestionAnswering and their RoBERTa twins, and the Llama family's
// *ForSequenceClassification (llama, mistral, qwen2, gemma, phi3) build
// that head, num_labels wide (len(id2label), else num_labels, else 2;
// question answering needs 2), with problem_type for the sequence
// classifiers and classifier_dropout (null: hidden_dropout_prob) for the
// BERT family. A base model (BertModel, LlamaModel) is built as the
// language model with a note; another model type's class of the same
// kind (LlamaForCausalLM in a mistral config) as this type's, with a note;
// any other class is refused by name with the classes batchfit builds for
// the model type. A Llama-family sequence classifier without pad_token_id
// gets a note: transformers refuses batches over one then.
//
// # Default sequence length
//
// A config whose graph has exactly the parameters (names and shapes) of a
// zoo transformer gets that entry's default sequence length (Llama-3-8B's
// 8192, also for Llama-3.1-8B), other configs min(max_position_embeddings,
// 4096): RoBERTa counts the positions after padding_idx, T5 uses
// n_positions (512 when absent). A vit config has none (DefaultSeq 0): its
// sequence is its patches and the class token, set by the image side,
// image_size unless models.Config.Image gives another (the model is then
// configured for that side: its position table grows with it); it is
// still matched to the zoo by its parameters (vit-base-patch16-224).
//
// # safetensors
//
// ReadHeader (ParseHeader for an io.ReaderAt) reads only the 8-byte
// little-endian header length and the JSON header, never the tensor data;
// the length is capped at 100 MB and the file size must cover the header
// and every tensor's data_offsets. ReadIndex reads a sharded checkpoint's
// model.safetensors.index.json and each shard's header once.
//
// # Weights against the graph
//
// Open compares the elements the checkpoint stores with the graph's
// parameter count (Config.Count). Left out, each listed in Tally.Excluded
// with its reason:
//
//	(^|\.)rotary_emb\.inv_freq$                 llama family, gpt_neox: the rotary buffer
//	                                             checkpoints saved before transformers 4.31 store
//	(^|\.)h\.\d+\.attn\.(bias|masked_bias)$     gpt2: GPT2Attention's causal-mask buffers
//	(^|\.)layers\.\d+\.attention\.(bias|masked_bias)$
//	                                             gpt_neox: GPTNeoXAttention's mask buffers (Pythia)
//	(^|\.)embeddings\.(position_ids|token_type_ids)$
//	                                             bert, roberta: id buffers of older checkpoints
//	(^|\.)pooler\.dense\.(weight|bias)$         bert, roberta: the pooler, which *ForMaskedLM
//	                                             lacks (transformers ignores it on load)
//	^cls\.seq_relationship\.(weight|bias)$      bert: BertForPreTraining's next-sentence head
//	^decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$
//	                                             t5: ignored on load by T5ForConditionalGeneration
//	(^|\.)pooler\.dense\.(weight|bias)$         vit: ViTModel's pooler, which
//	                                             ViTForImageClassification lacks
//
// and the second copies of tied weights, when stored (same element count
// as the first): embed_tokens/lm_head, wte/lm_head, embed_in/embed_out,
// word_embeddings/cls.predictions.decoder or lm_head.decoder (when
// tie_word_embeddings), BERT's cls.predictions.bias/decoder.bias and
// RoBERTa's lm_head.bias/decoder.bias (always one Parameter), T5's
// shared/encoder.embed_tokens/decoder.embed_tokens (always) and lm_head
// (when tied). Names match after any prefix, so base-model checkpoints
// ("h.0.attn…" for "transformer.h.0.attn…") count too. A disagreement is
// an error naming both counts and a few tensors only one side has.
package hf
