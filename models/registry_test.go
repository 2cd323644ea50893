package models

import (
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	for in, want := range map[string]string{"resnet50": "resnet50", "RESNET-50": "resnet50", "vit-b-16": "vit_b_16", "mistral-7b-v0.1": "Mistral-7B-v0.1", "llama-3-8b": "Llama-3-8B"} {
		m, err := Lookup(in)
		if err != nil || m.Name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", in, m.Name, err, want)
		}
	}
	if err := Check(); err != nil {
		t.Error(err)
	}
}

// Only whole names name a model. A prefix, even of one model only, is an
// error that lists the names it begins; then names that contain it; then
// the nearest of its family; a family the zoo lacks is said to be missing
// (mixtral is a mixture of experts, not the dense Mistral-7B).
func TestLookupUnknown(t *testing.T) {
	for _, c := range []struct {
		in, want string
		not      string // a name the message must not suggest
	}{
		{"resnet5", `unknown model "resnet5"; did you mean "resnet50"?`, "wide_resnet50_2"},
		{"Llama-3-7", `unknown model "Llama-3-7"; did you mean "Llama-3-70B"?`, ""},
		{"Mistral-7B", `did you mean "Mistral-7B-v0.1"?`, ""},
		{"resnet", `did you mean "resnet101", "resnet152", "resnet18", "resnet34", "resnet50"?`, "wide_resnet50_2"},
		{"vgg1", `"vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", and 2 more?`, ""},
		{"uncased", `did you mean "bert-base-uncased", "bert-large-uncased"?`, ""},
		{"resnet5O", `unknown model "resnet5O"; did you mean "resnet50", `, ""},
		{"lama-3-8b", `did you mean "Llama-3-8B"?`, ""},
		{"lalma-3-8b", `did you mean "Llama-3-8B", `, ""},
		{"mixtral", `unknown model "mixtral": the zoo has no mixtral models`, "Mistral"},
		{"mixtral-8x7b", `the zoo has no mixtral models`, "Mistral"},
		{"bart-base", `the zoo has no bart models`, "bert"},
		{"12345", `unknown model "12345" (see 'batchfit models')`, ""},
	} {
		_, err := Lookup(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lookup(%q): %v, want …%s…", c.in, err, c.want)
			continue
		}
		if c.not != "" && strings.Contains(err.Error(), c.not) {
			t.Errorf("Lookup(%q): %v suggests %s", c.in, err, c.not)
		}
	}
}

// Ranges under model parallelism: tensor parallelism t splits the key/value
// heads t ways (tensorParallel), so the width steps by head size × group ×
// t; sequence parallelism splits the sequence over the t ranks; a pipeline
// of p stages needs p layers (StageRange), and an explicit split fixes the
// depth.
func TestTransformerRanges(t *testing.T) {
	m, err := Lookup("Llama-3-8B")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		d        Dim
		c        Config
		min, stp int64
		max      int64
		valid    []int64
		invalid  []int64
	}{
		{"width", DimHidden, Config{}, 512, 512, 0, []int64{512, 4096, 4608}, []int64{64, 4000}},
		{"width, tp 2", DimHidden, Config{TP: 2}, 1024, 1024, 0, []int64{4096}, []int64{4608}},
		{"sequence", DimSeq, Config{}, 1, 1, 0, []int64{1, 8191}, []int64{0}},
		{"sequence, tp 4 + sp", DimSeq, Config{TP: 4, SP: true}, 4, 4, 0, []int64{4096}, []int64{4097}},
		{"depth, pp 4", DimLayers, Config{PP: 4}, 4, 1, 0, []int64{4, 5}, []int64{3}},
		{"depth, stages 10+22", DimLayers, Config{PP: 2, StageLayers: []int64{10, 22}}, 32, 1, 32, []int64{32}, []int64{31, 33}},
	} {
		r := m.Range(c.d, c.c)
		if r.Min != c.min || r.Step != c.stp || r.Max != c.max {
			t.Errorf("%s: %+v, want from %d in steps of %d up to %d", c.name, r, c.min, c.stp, c.max)
		}
		for _, v := range c.valid {
			if !r.Valid(v) {
				t.Errorf("%s: %d should be valid", c.name, v)
			}
			if cfg := c.c; c.d == DimHidden {
				cfg.Batch, cfg.Seq, cfg.Layers, cfg.Hidden = 1, 16, 1, v
				if _, err := m.Build(cfg); err != nil {
					t.Errorf("%s: %d is declared valid but does not build: %v", c.name, v, err)
				}
			}
		}
		for _, v := range c.invalid {
			if r.Valid(v) {
				t.Errorf("%s: %d should be invalid", c.name, v)
			}
		}
	}
}
