package models

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// Parameter counts of the task classes, from the sizes of each module
// (transformers_test.go gives the encoders'):
//
//	BertModel without pooler, bert-base (V=30522 E=768 P=512 T=2, 12 layers):
//	  embeddings 23,837,184 + 12·7,087,872 = 108,891,648
//	BertForSequenceClassification, 2 labels: + pooler 768·768+768 = 590,592
//	  + classifier 768·2+2 = 1,538 → 109,483,778 (no MLM head: the
//	  masked-LM class has 109,514,298)
//	BertForTokenClassification, 9 labels: + classifier 768·9+9 = 6,921 → 108,898,569
//	BertForQuestionAnswering: + qa_outputs 768·2+2 = 1,538 → 108,893,186
//	RobertaForSequenceClassification, 2 labels (RobertaModel without pooler
//	  39,000,576 + 12·7,087,872 = 124,055,040): + classifier.dense 590,592
//	  + classifier.out_proj 1,538 → 124,647,170
//	LlamaForSequenceClassification, Llama-2-7b, 2 labels: the causal LM's
//	  6,738,415,616 less lm_head 32000·4096 = 131,072,000, plus score
//	  4096·2 (no bias) = 8,192 → 6,607,351,808
//	Llama-3.2-1B (tied, so lm_head was never a second tensor): 1,235,814,400
//	  + score 2048·3 = 6,144 → 1,235,820,544
func TestTransformerHeadParamCounts(t *testing.T) {
	for _, c := range []struct {
		zoo, head string
		labels    int64
		want      int64
	}{
		{"bert-base-uncased", HeadSequenceClassification, 2, 109_483_778},
		{"bert-base-uncased", HeadTokenClassification, 9, 108_898_569},
		{"bert-base-uncased", HeadQuestionAnswering, 0, 108_893_186},
		{"roberta-base", HeadSequenceClassification, 2, 124_647_170},
		{"Llama-2-7b", HeadSequenceClassification, 2, 6_607_351_808},
		{"Llama-3.2-1B", HeadSequenceClassification, 3, 1_235_820_544},
	} {
		tc := hfZooEntry(t, c.zoo).tc
		tc.Head, tc.NumLabels = c.head, c.labels
		g := hfBuild(t, c.zoo, tc, Config{Batch: 1, Seq: 8})
		if got := g.ParamCount(); got != c.want {
			t.Errorf("%s %s: %d parameters, want %d (diff %d)", c.zoo, c.head, got, c.want, got-c.want)
		}
	}
}

// The loss reads logits of the head's width, never the vocabulary's: for
// batch 4 and sequence 16, BERT's sequence classifier hands cross_entropy
// [4, 2] (32 bytes in float32), the token classifier [4·16, 9], the
// question-answering head two [4, 16] copies (start and end, each
// 4·16·4 = 256 bytes, returned with the output), Llama's score [4, 16, 2]
// pooled to [4, 2].
func TestTransformerHeadLogits(t *testing.T) {
	bert := hfZooEntry(t, "bert-base-uncased").tc
	llama := hfZooEntry(t, "Llama-3.2-1B").tc
	for _, c := range []struct {
		name   string
		tc     TransformerConfig
		head   string
		labels int64
		// ce lists each cross_entropy's logits input shape; returned the
		// returned tensors' shapes.
		ce, returned string
		noParam      string // a parameter the class has not
	}{
		{"bert seq", bert, HeadSequenceClassification, 2, "[4, 2]", "[4, 2]", "cls.predictions.bias"},
		{"bert token", bert, HeadTokenClassification, 9, "[64, 9]", "[4, 16, 9]", "bert.pooler.dense.weight"},
		{"bert qa", bert, HeadQuestionAnswering, 2, "[4, 16] [4, 16]", "[4, 16] [4, 16]", "bert.pooler.dense.weight"},
		{"llama seq", llama, HeadSequenceClassification, 2, "[4, 2]", "[4, 2]", "lm_head.weight"},
	} {
		tc := c.tc
		tc.Head, tc.NumLabels, tc.Layers = c.head, c.labels, 1
		g := hfBuild(t, c.name, tc, Config{Batch: 4, Seq: 16})
		var ce, ret []string
		for _, op := range g.Ops {
			if op.Kind == graph.CrossEntropy {
				ce = append(ce, g.Tensor(op.Inputs[0]).Shape.String())
			}
		}
		for _, id := range g.Returned {
			ret = append(ret, g.Tensor(id).Shape.String())
		}
		if got := strings.Join(ce, " "); got != c.ce {
			t.Errorf("%s: cross_entropy of %s, want %s", c.name, got, c.ce)
		}
		if got := strings.Join(ret, " "); got != c.returned {
			t.Errorf("%s: returns %s, want %s", c.name, got, c.returned)
		}
		if s := g.Tensor(g.Loss).Shape; s.Numel() != 1 {
			t.Errorf("%s: loss of shape %v", c.name, s)
		}
		for _, id := range g.Params() {
			if p := g.Tensor(id); p.Name == c.noParam {
				t.Errorf("%s: has %s", c.name, c.noParam)
			}
		}
		for _, tn := range g.Tensors {
			if s := tn.Shape; len(s) > 0 && s[len(s)-1] == tc.VocabSize && !strings.Contains(tn.Name, "embed") {
				t.Errorf("%s: %s %v is vocabulary-wide", c.name, tn.Name, s)
			}
		}
	}
}

// BERT pools the [CLS] row through pooler.dense and tanh, then dropout
// (hidden_dropout_prob when classifier_dropout is unset: the caller's
// ClassifierDropoutP) and the classifier; RoBERTa's head drops out twice.
func TestTransformerHeadOps(t *testing.T) {
	tc := hfZooEntry(t, "bert-base-uncased").tc
	tc.Head, tc.Layers, tc.ClassifierDropoutP = HeadSequenceClassification, 1, 0.1
	g := hfBuild(t, "bert-seq", tc, Config{Batch: 2, Seq: 8})
	if got, want := hfKinds(g, "bert.pooler"), "view linear tanh"; got != want {
		t.Errorf("pooler: %s, want %s", got, want)
	}
	if hfCount(g, graph.Dropout, "dropout") == 0 || hfOp(t, g, "classifier").Kind != graph.Linear {
		t.Error("no dropout and classifier after the pooler")
	}
	tc = hfZooEntry(t, "roberta-base").tc
	tc.Head, tc.Layers, tc.ClassifierDropoutP = HeadSequenceClassification, 1, 0.1
	g = hfBuild(t, "roberta-seq", tc, Config{Batch: 2, Seq: 8})
	if got, want := hfKinds(g, "classifier."), "view dropout linear tanh dropout linear"; got != want {
		t.Errorf("roberta head: %s, want %s", got, want)
	}
}

func TestTransformerHeadErrors(t *testing.T) {
	bert := hfZooEntry(t, "bert-base-uncased").tc
	llama := hfZooEntry(t, "Llama-3.2-1B").tc
	gpt2 := hfZooEntry(t, "gpt2").tc
	for _, c := range []struct {
		name string
		tc   TransformerConfig
		head string
		nl   int64
		c    Config
		want string
	}{
		{"llama token", llama, HeadTokenClassification, 2, Config{Batch: 1, Seq: 8}, "has no token_classification head"},
		{"gpt2 seq", gpt2, HeadSequenceClassification, 2, Config{Batch: 1, Seq: 8}, "has no sequence_classification head"},
		{"qa with 3 labels", bert, HeadQuestionAnswering, 3, Config{Batch: 1, Seq: 8}, "num_labels must be 2"},
		{"tensor parallel", llama, HeadSequenceClassification, 2, Config{Batch: 1, Seq: 8, TP: 2}, "tensor and pipeline parallelism"},
		{"decode", llama, HeadSequenceClassification, 2, Config{Batch: 1, Seq: 8, Decode: &Decode{}}, "generation needs the language-model head"},
	} {
		tc := c.tc
		tc.Head, tc.NumLabels, tc.Layers = c.head, c.nl, 2
		_, err := BuildTransformer(c.name, tc, c.c)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
