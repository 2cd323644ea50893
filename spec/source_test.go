package spec

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
)

// A spec as a model source: the dimensions it can vary follow from its
// parameters and its input, the sequence's bound from its position table.
func TestSource(t *testing.T) {
	const noSeqParam = "name: ids\ninput: {shape: [seq], dtype: int64}\nloss: cross_entropy\nlayers:\n  - embedding: {num: 100, dim: 8}\n  - linear: 100\n"
	tests := []struct {
		name    string
		file    string // under examples/, or "" for text
		text    string
		dims    []models.Dim
		seq     int64 // DefaultSeq
		seqMax  int64 // Range(DimSeq).Max, 0 for AnyPositive
		badOver models.Config
		badWhy  string
	}{
		// tinygpt.yaml declares seq 256 and layers, no hidden, and a
		// position_embedding of 1024 positions.
		{name: "tinygpt", file: "tinygpt.yaml", dims: []models.Dim{models.DimLayers, models.DimSeq}, seq: 256, seqMax: 1024,
			badOver: models.Config{Batch: 1, Seq: 8, Hidden: 64}, badWhy: `declares no "hidden" parameter`},
		// mlp.yaml declares layers and hidden, and has no sequence.
		{name: "mlp", file: "mlp.yaml", dims: []models.Dim{models.DimLayers, models.DimHidden}, seq: 0, seqMax: 0},
		// seq in the input but not among the parameters: the default
		// length, no layers to override.
		{name: "undeclared seq", text: noSeqParam, dims: []models.Dim{models.DimSeq}, seq: defaultSeq, seqMax: 0,
			badOver: models.Config{Batch: 1, Seq: 8, Layers: 2}, badWhy: `declares no "layers" parameter`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Spec
			var err error
			if tt.file != "" {
				s, err = ParseFile(filepath.Join("..", "examples", tt.file))
			} else {
				s, err = Parse([]byte(tt.text), tt.name+".yaml")
			}
			if err != nil {
				t.Fatal(err)
			}
			// the spec's name field, else the file's base name: tinygpt.yaml
			// and mlp.yaml name themselves so, noSeqParam says "ids"
			src := NewSource(s, tt.name+".yaml")
			want := tt.name
			if tt.text != "" {
				want = "ids"
			}
			if src.Name() != want {
				t.Errorf("Name = %q, want %q", src.Name(), want)
			}
			if got := src.Dims(); !slices.Equal(got, tt.dims) {
				t.Errorf("Dims = %v, want %v", got, tt.dims)
			}
			if got := src.DefaultSeq(); got != tt.seq {
				t.Errorf("DefaultSeq = %d, want %d", got, tt.seq)
			}
			r := src.Range(models.DimSeq, models.Config{Batch: 1})
			if tt.seqMax == 0 && r != models.AnyPositive || tt.seqMax != 0 && (r.Max != tt.seqMax || r.Min != 1) {
				t.Errorf("Range(seq) = %+v, want max %d", r, tt.seqMax)
			}
			if r := src.Range(models.DimBatch, models.Config{Batch: 1}); r != models.AnyPositive {
				t.Errorf("Range(batch) = %+v, want any positive", r)
			}
			if _, err := src.Build(models.Config{Batch: 2, Seq: max(tt.seq, 1)}); err != nil {
				t.Errorf("Build: %v", err)
			}
			if tt.badWhy != "" {
				if _, err := src.Build(tt.badOver); err == nil || !strings.Contains(err.Error(), tt.badWhy) {
					t.Errorf("Build(%+v) = %v, want %q", tt.badOver, err, tt.badWhy)
				}
			}
		})
	}
}
