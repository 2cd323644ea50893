package hf

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/models"
)

// classPrefix is how transformers names each model type's classes
// (BertForMaskedLM, GPT2LMHeadModel, Qwen2ForCausalLM, ...).
var classPrefix = map[string]string{
	"bert": "Bert", "roberta": "Roberta", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2",
	"gemma": "Gemma", "phi3": "Phi3", "gpt2": "GPT2", "gpt_neox": "GPTNeoX", "opt": "OPT", "t5": "T5", "vit": "ViT",
}

// headSuffix is the class name's ending for each head models builds.
var headSuffix = []struct{ head, suffix string }{
	{models.HeadSequenceClassification, "ForSequenceClassification"},
	{models.HeadTokenClassification, "ForTokenClassification"},
	{models.HeadQuestionAnswering, "ForQuestionAnswering"},
}

// classAliases are other names of the language-model class that
// checkpoints carry: T5WithLMHeadModel is T5ForConditionalGeneration's
// name before transformers 2.x renamed it, and MT5ForConditionalGeneration
// is the same module tree (modeling_mt5.py copies T5's).
var classAliases = map[string]map[string]bool{
	"t5": {"T5WithLMHeadModel": true, "MT5ForConditionalGeneration": true},
}

// buildableClasses lists the classes batchfit builds for model_type mt,
// the language-model class first, each with its models head.
func buildableClasses(mt string) (names, heads []string) {
	names, heads = []string{lmClassName(mt)}, []string{""}
	for _, h := range headSuffix {
		if models.HeadBuilt(mt, h.head) {
			names = append(names, classPrefix[mt]+h.suffix)
			heads = append(heads, h.head)
		}
	}
	return names, heads
}

// parseHead reads architectures, the class the checkpoint was saved from,
// and picks the head the graph is built with: the language-model class,
// or one of the task classes buildableClasses lists. A base model
// (BertModel, LlamaModel: no head of its own) is built with the
// language-model head and says so in a note; any other class is refused
// by name with the list. Every entry must name the same head.
func parseHead(f *fields, mt string, c *Config) string {
	names, heads := buildableClasses(mt)
	head, chosen := "", ""
	for _, a := range c.Architectures {
		h, ok := "", false
		for i, n := range names {
			if a == n {
				h, ok = heads[i], true
			}
		}
		if !ok {
			// another model type's class of the same kind: model_type
			// decides the modules (AutoConfig, AutoModelFor*), so the
			// class is this type's with that head
			if p, suffix := splitClass(a); p != "" && p != classPrefix[mt] {
				for i, n := range names {
					if n[len(classPrefix[mt]):] == suffix {
						h, ok = heads[i], true
						c.Notes = append(c.Notes, fmt.Sprintf("architectures %s in a %s config: the graph is %s", a, mt, n))
					}
				}
			}
		}
		switch {
		case ok:
		case classAliases[mt][a]:
			ok = true
		case a == classPrefix[mt]+"Model":
			ok = true
			c.Notes = append(c.Notes, fmt.Sprintf("architectures %s: a checkpoint without a task head; the graph is %s's", a, names[0]))
		}
		if !ok {
			f.fail("architectures", "%s: batchfit builds %s for %s configs", a, strings.Join(names, ", "), mt)
			return ""
		}
		if chosen != "" && h != head {
			f.fail("architectures", "%s and %s are different heads; batchfit builds one class", chosen, a)
			return ""
		}
		head, chosen = h, a
	}
	return head
}

// parseHeadFields reads what the task head of tc needs: num_labels (as
// PretrainedConfig gives it: len(id2label), else num_labels, else 2), the
// sequence classifier's problem_type, and the BERT family's
// classifier_dropout (null or absent: hidden_dropout_prob, as
// BertForSequenceClassification, BertForTokenClassification and
// RobertaClassificationHead read it).
func parseHeadFields(f *fields, mt string, c *Config) {
	tc := &c.Transformer
	if tc.Head == "" {
		return
	}
	tc.NumLabels = f.numLabels(c)
	if tc.Head == models.HeadQuestionAnswering && tc.NumLabels != 2 && f.err == nil {
		// start_logits, end_logits = logits.split(1, dim=-1) unpacks two
		f.fail("num_labels", "%s splits qa_outputs into start and end logits: want 2 labels, got %d", c.className(), tc.NumLabels)
	}
	if tc.Head == models.HeadSequenceClassification {
		switch pt := f.str("problem_type", ""); pt {
		case "", "single_label_classification", "regression":
			tc.ProblemType = pt
		case "multi_label_classification":
			f.unsupported("problem_type", true, "%q (BCEWithLogitsLoss)", pt)
		default:
			f.fail("problem_type", "unknown %q (transformers accepts regression, single_label_classification, multi_label_classification)", pt)
		}
	}
	if mt == "bert" || mt == "roberta" {
		tc.ClassifierDropoutP = f.prob("classifier_dropout", tc.DropoutP)
	}
	if tc.Head == models.HeadSequenceClassification && classPrefix[mt] != "Bert" && classPrefix[mt] != "Roberta" {
		// GenericForSequenceClassification (and the per-model classes
		// before it) find the last non-padding token from pad_token_id
		// and raise "Cannot handle batch sizes > 1 if no padding token is
		// defined." without one.
		if _, ok := f.raw("pad_token_id"); !ok {
			c.Notes = append(c.Notes, fmt.Sprintf("pad_token_id is not set: %s raises \"Cannot handle batch sizes > 1 if no padding token is defined.\" for batches over 1 (set config.pad_token_id, often to the eos token; the memory is the same)", c.className()))
		}
	}
}

// className is the transformers class the graph follows.
func (c *Config) className() string {
	for _, h := range headSuffix {
		if c.Transformer.Head == h.head {
			return classPrefix[c.ModelType] + h.suffix
		}
	}
	return lmClassName(c.ModelType)
}

// countRules are the model type's rules for the class built: a BERT
// sequence classifier has the pooler the masked-LM class has not
// (BertForSequenceClassification builds BertModel with its pooler), so
// its checkpoint's pooler is counted.
func (c *Config) countRules() countRules {
	r := countRulesByType[c.ModelType]
	if c.ModelType != "bert" || c.Transformer.Head != models.HeadSequenceClassification {
		return r
	}
	var keep []rule
	for _, e := range r.exclude {
		if e.re != rulePooler.re {
			keep = append(keep, e)
		}
	}
	r.exclude = keep
	return r
}

// splitClass splits a transformers class name into the longest model
// type prefix it starts with and the rest ("", name when none).
func splitClass(name string) (prefix, suffix string) {
	for _, p := range classPrefix {
		if strings.HasPrefix(name, p) && len(p) > len(prefix) {
			prefix = p
		}
	}
	return prefix, name[len(prefix):]
}
