package models

import (
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	for in, want := range map[string]string{"resnet50": "resnet50", "RESNET-50": "resnet50", "vit-b-16": "vit_b_16", "Mistral-7B": "Mistral-7B-v0.1", "llama-3-8b": "Llama-3-8B"} {
		m, err := Lookup(in)
		if err != nil || m.Name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", in, m.Name, err, want)
		}
	}
	// "resnet" is a prefix of several models: ambiguous, so an error with
	// suggestions rather than a guess.
	if _, err := Lookup("resnet"); err == nil {
		t.Error("Lookup(resnet): want an error, the prefix is ambiguous")
	}
	if _, err := Lookup("resnet5O"); err == nil || !strings.Contains(err.Error(), `"resnet50"`) {
		t.Errorf("Lookup(resnet5O): %v", err)
	}
	if err := Check(); err != nil {
		t.Error(err)
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
