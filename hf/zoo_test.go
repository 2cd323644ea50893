package hf

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
)

var _ predict.Source = (*Model)(nil)

// Every transformers model of the zoo has its published config.json in
// testdata/configs/NAME; read through LoadConfig it must build the zoo's
// graph: the same parameter count and, op for op, the same graph.
func TestZooConfigs(t *testing.T) {
	n := 0
	for _, zm := range models.All() {
		if zm.Family != "transformers" {
			continue
		}
		n++
		t.Run(zm.Name, func(t *testing.T) {
			path := filepath.Join("testdata", "configs", zm.Name, "config.json")
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if m.Name() != zm.Name {
				t.Errorf("Name() = %q, want %q", m.Name(), zm.Name)
			}
			if m.Config.Zoo != zm.Name {
				t.Errorf("identified as zoo entry %q, want %q", m.Config.Zoo, zm.Name)
			}
			if m.DefaultSeq() != zm.DefaultSeq {
				t.Errorf("DefaultSeq() = %d, want the zoo's %d", m.DefaultSeq(), zm.DefaultSeq)
			}
			want, _, err := models.Build(zm.Name, models.Config{Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Build(models.Config{Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			if got.ParamCount() != want.ParamCount() || m.ParamCount != want.ParamCount() {
				t.Errorf("%d parameters (Open: %d), zoo %d", got.ParamCount(), m.ParamCount, want.ParamCount())
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the graph differs from the zoo's (%d tensors, %d ops; zoo %d, %d)", len(got.Tensors), len(got.Ops), len(want.Tensors), len(want.Ops))
			}
		})
	}
	if n == 0 {
		t.Fatal("no transformers in the zoo")
	}
}
