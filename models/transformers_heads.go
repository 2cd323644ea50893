package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// The task heads transformers puts on an encoder or a decoder in place of
// the language-model head (TransformerConfig.Head). Each follows the
// forward of its class in transformers' modeling code:
//
//   - BertForSequenceClassification (models/bert/modeling_bert.py): BertModel
//     with its pooler (BertPooler: hidden_states[:, 0], dense, tanh), then
//     dropout(classifier_dropout, else hidden_dropout_prob) and
//     classifier = nn.Linear(hidden_size, num_labels).
//   - RobertaForSequenceClassification (models/roberta/modeling_roberta.py):
//     RobertaModel(add_pooling_layer=False) and RobertaClassificationHead:
//     features[:, 0, :], dropout, dense, torch.tanh, dropout, out_proj.
//   - BertForTokenClassification, RobertaForTokenClassification: the model
//     without a pooler, dropout(classifier_dropout, else
//     hidden_dropout_prob) and classifier = nn.Linear(hidden_size,
//     num_labels) on every position.
//   - BertForQuestionAnswering, RobertaForQuestionAnswering: the model
//     without a pooler and qa_outputs = nn.Linear(hidden_size, num_labels)
//     on every position (num_labels is 2: logits.split(1, dim=-1) unpacks
//     into start and end logits, each .squeeze(-1).contiguous()); the loss
//     is (CrossEntropyLoss(start) + CrossEntropyLoss(end)) / 2 over the
//     sequence positions.
//   - LlamaForSequenceClassification and its Mistral, Qwen2, Gemma and Phi3
//     copies (GenericForSequenceClassification, modeling_layers.py; each
//     model's own class before it): score = nn.Linear(hidden_size,
//     num_labels, bias=False) on every position of the normed hidden
//     states, then logits[torch.arange(B), last_non_pad_token]: the row of
//     the last non-padding token, a new [B, num_labels] tensor (advanced
//     indexing copies; its backward keeps only the two [B] int64 indices,
//     16·B bytes, which are not modelled), and ForSequenceClassificationLoss
//     on it (loss_utils.py: no upcast).
//
// The sequence-classification losses follow the problem type transformers
// infers for integer labels (problemType): MSELoss(logits.squeeze(),
// labels.squeeze()) for one label, CrossEntropyLoss()(logits.view(-1,
// num_labels), labels.view(-1)) for more.

// The heads BuildTransformer builds besides the language-model head.
const (
	HeadSequenceClassification = "sequence_classification"
	HeadTokenClassification    = "token_classification"
	HeadQuestionAnswering      = "question_answering"
)

// headArchs lists, per head, the model types whose builder has it.
var headArchs = map[string]map[string]bool{
	HeadSequenceClassification: {"bert": true, "roberta": true, "llama": true, "mistral": true, "qwen2": true, "gemma": true, "phi3": true},
	HeadTokenClassification:    {"bert": true, "roberta": true},
	HeadQuestionAnswering:      {"bert": true, "roberta": true},
}

// HeadBuilt reports whether BuildTransformer builds head ("" is the
// language-model head, which every model type has) for model_type arch.
func HeadBuilt(arch, head string) bool {
	if head == "" {
		_, ok := hfArchs[arch]
		return ok
	}
	return headArchs[head][arch]
}

// checkHead validates the head and what it is built with.
func (tc TransformerConfig) checkHead(c Config) error {
	if tc.Head == "" {
		return nil
	}
	if !HeadBuilt(tc.Arch, tc.Head) {
		return fmt.Errorf("model_type %s has no %s head", tc.Arch, tc.Head)
	}
	if c.Decode != nil {
		return fmt.Errorf("generation needs the language-model head, not a %s head", tc.Head)
	}
	if c.TP > 1 || c.PP > 1 {
		return fmt.Errorf("tensor and pipeline parallelism are built for the language-model head, not a %s head", tc.Head)
	}
	if tc.NumLabels < 0 {
		return fmt.Errorf("num_labels must not be negative, got %d", tc.NumLabels)
	}
	if tc.ClassifierDropoutP < 0 || tc.ClassifierDropoutP >= 1 {
		return fmt.Errorf("classifier dropout must lie in [0, 1), got %g", tc.ClassifierDropoutP)
	}
	switch {
	case tc.Head == HeadQuestionAnswering && tc.numLabels() != 2:
		return fmt.Errorf("question answering splits qa_outputs into start and end logits: num_labels must be 2, got %d", tc.numLabels())
	case tc.Head == HeadSequenceClassification:
		switch tc.ProblemType {
		case "", "single_label_classification", "regression":
		case "multi_label_classification":
			return fmt.Errorf("problem_type %q (BCEWithLogitsLoss) is not supported", tc.ProblemType)
		default:
			return fmt.Errorf("unknown problem_type %q (want single_label_classification or regression)", tc.ProblemType)
		}
	}
	return nil
}

// headTargets are the labels a head's loss reads.
type headTargets struct {
	labels, start, end graph.TensorID
}

// targets declares the batch's labels for the head: [B] class ids for
// sequence classification (float scores for regression: [B] for one
// label, [B, num_labels] for more), [B, L] class ids for token
// classification, start_positions and end_positions [B] for question
// answering.
func (t *hfBuilder) headTargets() headTargets {
	b, tc := t.b, t.tc
	tg := headTargets{labels: graph.None, start: graph.None, end: graph.None}
	switch tc.Head {
	case HeadSequenceClassification:
		switch {
		case tc.problemType() != "regression":
			tg.labels = b.Target("labels", graph.Shape{t.B}, graph.I64)
		case tc.numLabels() == 1:
			tg.labels = b.Target("labels", graph.Shape{t.B}, graph.F32)
		default:
			tg.labels = b.Target("labels", graph.Shape{t.B, tc.numLabels()}, graph.F32)
		}
	case HeadTokenClassification:
		tg.labels = b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
	case HeadQuestionAnswering:
		tg.start = b.Target("start_positions", graph.Shape{t.B}, graph.I64)
		tg.end = b.Target("end_positions", graph.Shape{t.B}, graph.I64)
	}
	return tg
}

// encoderHead puts the head on BERT's or RoBERTa's last hidden states h
// [B, L, E]; prefix is the base model's scope ("bert", "roberta"), where
// BertModel's pooler sits.
func (t *hfBuilder) encoderHead(prefix string, h graph.TensorID, tg headTargets) {
	b, tc := t.b, t.tc
	E, NL := tc.Hidden, tc.numLabels()
	roberta := tc.Arch == "roberta"
	switch tc.Head {
	case HeadSequenceClassification:
		var logits graph.TensorID
		if roberta {
			// RobertaClassificationHead
			b.Scope("classifier", func() {
				dense := t.linear("dense", E, E, true)
				out := t.linear("out_proj", E, NL, true)
				x := b.Select("select", h, 1) // features[:, 0, :]: a view
				x = b.Dropout("dropout", x, tc.ClassifierDropoutP, false)
				x = b.Act(graph.Tanh, "tanh", t.apply("dense", x, dense), false)
				x = b.Dropout("dropout_1", x, tc.ClassifierDropoutP, false)
				logits = t.apply("out_proj", x, out)
			})
		} else {
			var pooled graph.TensorID
			b.Scope(prefix, func() {
				b.Scope("pooler", func() {
					// BertPooler: first_token_tensor = hidden_states[:, 0]
					// (a view), dense, nn.Tanh.
					dense := t.linear("dense", E, E, true)
					first := b.Select("select", h, 1)
					pooled = b.Act(graph.Tanh, "activation", t.apply("dense", first, dense), false)
				})
			})
			cls := t.linear("classifier", E, NL, true)
			x := b.Dropout("dropout", pooled, tc.ClassifierDropoutP, false)
			logits = t.apply("classifier", x, cls)
		}
		b.Return(logits) // SequenceClassifierOutput(loss, logits)
		t.sequenceClassificationLoss(logits, tg.labels)
	case HeadTokenClassification:
		cls := t.linear("classifier", E, NL, true)
		x := b.Dropout("dropout", h, tc.ClassifierDropoutP, false)
		logits := t.apply("classifier", x, cls)
		b.Return(logits) // TokenClassifierOutput(loss, logits)
		b.Scope("loss", func() {
			flat := b.Reshape("view_logits", logits, -1, NL)
			target := b.Reshape("view_labels", tg.labels, -1)
			b.CrossEntropy("cross_entropy", flat, target)
		})
	case HeadQuestionAnswering:
		qa := t.linear("qa_outputs", E, NL, true)
		logits := t.apply("qa_outputs", h, qa) // [B, L, 2]
		// start_logits, end_logits = logits.split(1, dim=-1), each
		// .squeeze(-1) (views of stride 2) and .contiguous(): a [B, L]
		// copy each, which QuestionAnsweringModelOutput returns.
		start := b.Contiguous("start_logits", b.Select("split_start", logits, -1))
		end := b.Contiguous("end_logits", b.Select("split_end", logits, -1))
		b.Return(start)
		b.Return(end)
		b.Scope("loss", func() {
			// ignored_index = start_logits.size(1); the positions are
			// clamp_()ed in place; CrossEntropyLoss(ignore_index=…) over
			// the L positions of each row; total_loss = (start_loss +
			// end_loss) / 2.
			s := b.CrossEntropy("start_loss", start, tg.start)
			e := b.CrossEntropy("end_loss", end, tg.end)
			b.Output(b.Scale("div", b.Add("add", s, e)))
		})
	}
}

// decoderHead puts the sequence-classification head on a Llama-family
// model's normed hidden states h [B, L, E] (see the comment at the top of
// this file).
func (t *hfBuilder) decoderHead(h graph.TensorID, tg headTargets) {
	b, tc := t.b, t.tc
	score := t.linear("score", tc.Hidden, tc.numLabels(), false)
	logits := t.apply("score", h, score) // [B, L, num_labels]
	// logits[torch.arange(B), last_non_pad_token]: the row's position
	// selected (a view here) and copied out by advanced indexing.
	pooled := b.Contiguous("pooled_logits", b.Select("last_non_pad_token", logits, 1))
	b.Return(pooled) // SequenceClassifierOutputWithPast(logits=pooled_logits)
	t.sequenceClassificationLoss(pooled, tg.labels)
}

// sequenceClassificationLoss is the loss of the sequence classifiers on
// logits [B, num_labels] (BertForSequenceClassification's inline loss,
// loss_utils.ForSequenceClassificationLoss): MSELoss on
// logits.squeeze() for regression with one label, on the logits for
// more; CrossEntropyLoss on logits.view(-1, num_labels) otherwise.
func (t *hfBuilder) sequenceClassificationLoss(logits, labels graph.TensorID) {
	b, NL := t.b, t.tc.numLabels()
	b.Scope("loss", func() {
		if t.tc.problemType() == "regression" {
			pred := logits
			if NL == 1 {
				pred = b.Reshape("squeeze_logits", logits, t.B) // a view
			}
			b.MSELoss("mse_loss", pred, labels)
			return
		}
		flat := b.Reshape("view_logits", logits, -1, NL)
		target := b.Reshape("view_labels", labels, -1)
		b.CrossEntropy("cross_entropy", flat, target)
	})
}
