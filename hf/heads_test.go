package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func bertBaseConfig(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "configs", "bert-base-uncased", ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The class in architectures is the class built. bert-base-uncased:
// BertModel without pooler is 23,837,184 (embeddings) + 12·7,087,872 =
// 108,891,648; BertForMaskedLM adds its head, 768·768+768 + 2·768 + 30522
// = 622,650 → 109,514,298; BertForSequenceClassification with 2 labels
// adds the pooler 768·768+768 = 590,592 and the classifier 768·2+2 =
// 1,538 → 109,483,778; BertForTokenClassification with 9 labels adds
// 768·9+9 = 6,921 → 108,898,569; BertForQuestionAnswering adds
// qa_outputs 768·2+2 → 108,893,186. tinyLlama (106,816 as a causal LM)
// as LlamaForSequenceClassification with 3 labels: less lm_head 256·64 =
// 16,384, plus score 64·3 without bias = 192 → 90,624.
func TestParseConfigArchitectures(t *testing.T) {
	labels := func(n int) map[string]any {
		m := map[string]any{}
		for i := 0; i < n; i++ {
			m[string(rune('0'+i))] = "L" + string(rune('0'+i))
		}
		return m
	}
	for _, c := range []struct {
		name   string
		cfg    map[string]any
		class  string
		params int64
		note   string
	}{
		{"bert masked LM", bertBaseConfig(t), "BertForMaskedLM", 109_514_298, ""},
		{"bert no architectures", with(bertBaseConfig(t), "architectures", remove), "BertForMaskedLM", 109_514_298, ""},
		{"bert sequence", with(bertBaseConfig(t), "architectures", []any{"BertForSequenceClassification"}, "id2label", labels(2)),
			"BertForSequenceClassification", 109_483_778, ""},
		{"bert sequence num_labels", with(bertBaseConfig(t), "architectures", []any{"BertForSequenceClassification"}, "num_labels", 2),
			"BertForSequenceClassification", 109_483_778, ""},
		{"bert token", with(bertBaseConfig(t), "architectures", []any{"BertForTokenClassification"}, "id2label", labels(9)),
			"BertForTokenClassification", 108_898_569, ""},
		{"bert qa", with(bertBaseConfig(t), "architectures", []any{"BertForQuestionAnswering"}),
			"BertForQuestionAnswering", 108_893_186, ""},
		{"bert base model", with(bertBaseConfig(t), "architectures", []any{"BertModel"}),
			"BertForMaskedLM", 109_514_298, "architectures BertModel: a checkpoint without a task head; the graph is BertForMaskedLM's"},
		{"llama sequence", with(tinyLlama(), "architectures", []any{"LlamaForSequenceClassification"}, "id2label", labels(3)),
			"LlamaForSequenceClassification", 90_624, `pad_token_id is not set: LlamaForSequenceClassification raises "Cannot handle batch sizes > 1`},
		{"llama sequence padded", with(tinyLlama(), "architectures", []any{"LlamaForSequenceClassification"}, "id2label", labels(3), "pad_token_id", 0),
			"LlamaForSequenceClassification", 90_624, ""},
		{"mistral class in a llama config", with(tinyLlama(), "architectures", []any{"MistralForCausalLM"}),
			"LlamaForCausalLM", tinyLlamaParams, "architectures MistralForCausalLM in a llama config: the graph is LlamaForCausalLM"},
	} {
		cfg, err := ParseConfig(mustJSON(t, c.cfg), cfgName)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := cfg.className(); got != c.class {
			t.Errorf("%s: class %s, want %s", c.name, got, c.class)
		}
		if cfg.paramCount != c.params {
			t.Errorf("%s: %d parameters, want %d (diff %d)", c.name, cfg.paramCount, c.params, cfg.paramCount-c.params)
		}
		notes := strings.Join(cfg.Notes, "\n")
		if (c.note == "") != (notes == "") || !strings.Contains(notes, c.note) {
			t.Errorf("%s: notes %q, want %q", c.name, notes, c.note)
		}
	}
}

func TestParseConfigArchitecturesRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   map[string]any
		field string
		msg   string
	}{
		{"llama token", with(tinyLlama(), "architectures", []any{"LlamaForTokenClassification"}), "architectures",
			"LlamaForTokenClassification: batchfit builds LlamaForCausalLM, LlamaForSequenceClassification for llama configs"},
		{"gpt2 sequence", with(tinyGPT2(), "architectures", []any{"GPT2ForSequenceClassification"}), "architectures",
			"GPT2ForSequenceClassification: batchfit builds GPT2LMHeadModel for gpt2 configs"},
		{"bert pretraining", with(tinyBERT("bert"), "architectures", []any{"BertForPreTraining"}), "architectures",
			"BertForPreTraining: batchfit builds BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering for bert configs"},
		{"two heads", with(tinyBERT("bert"), "architectures", []any{"BertForMaskedLM", "BertForTokenClassification"}), "architectures",
			"BertForMaskedLM and BertForTokenClassification are different heads"},
		{"qa labels", with(tinyBERT("roberta"), "architectures", []any{"RobertaForQuestionAnswering"}, "num_labels", 3), "num_labels",
			"want 2 labels, got 3"},
		{"multi-label", with(tinyBERT("bert"), "architectures", []any{"BertForSequenceClassification"}, "problem_type", "multi_label_classification"), "problem_type",
			"not supported"},
		{"classifier dropout", with(tinyBERT("bert"), "architectures", []any{"BertForTokenClassification"}, "classifier_dropout", 1.5), "classifier_dropout",
			"[0, 1)"},
	} {
		_, err := ParseConfig(mustJSON(t, c.cfg), cfgName)
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != c.field || !strings.Contains(fe.Msg, c.msg) {
			t.Errorf("%s: %v, want %s: …%s…", c.name, err, c.field, c.msg)
		}
	}
}

// A BERT sequence classifier's checkpoint holds the pooler, a parameter of
// its class: counted, where the masked-LM class leaves it out (tinyBERT:
// pooler.dense 32·32 + 32 = 1,056 elements).
func TestCountPooler(t *testing.T) {
	ck := &Checkpoint{Files: []*Header{{Path: WeightsName, Tensors: []Tensor{
		{Name: "bert.pooler.dense.weight", DType: "F32", Shape: []int64{32, 32}},
		{Name: "bert.pooler.dense.bias", DType: "F32", Shape: []int64{32}},
	}}}}
	for _, c := range []struct {
		arch   string
		params int64
	}{
		{"BertForMaskedLM", 0},
		{"BertForSequenceClassification", 1056},
		{"BertForTokenClassification", 0}, // _keys_to_ignore_on_load_unexpected = [r"pooler"]
	} {
		cfg, err := ParseConfig(mustJSON(t, with(tinyBERT("bert"), "architectures", []any{c.arch})), cfgName)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Count(ck).Params; got != c.params {
			t.Errorf("%s: %d pooler elements counted, want %d", c.arch, got, c.params)
		}
	}
}

// The report names the class built; the config's notes are the
// prediction's notes (Notes), not repeated on that line.
func TestModelNoteClass(t *testing.T) {
	dir := modelDir(t, with(tinyLlama(), "architectures", []any{"LlamaForSequenceClassification"}), nil)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Note(); !strings.Contains(n, "LlamaForSequenceClassification from ") {
		t.Errorf("note %q does not name the class built", n)
	}
	if len(m.Notes()) != 1 || !strings.Contains(m.Notes()[0], "pad_token_id is not set") {
		t.Errorf("notes %q, want the pad_token_id one", m.Notes())
	}
}
