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
