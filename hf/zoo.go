package hf

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// The zoo's transformers are known by the parameters of their graphs: a
// config whose graph has exactly the parameters (names and shapes, in
// order) of a zoo entry's is that entry's architecture, and gets the
// zoo's default sequence length. Llama-3.1-8B, for instance, has
// Llama-3-8B's parameters and so its 8192, not min(131072, 4096).

var zoo struct {
	once sync.Once
	// byParams maps a parameter fingerprint to the zoo entry; entries
	// sharing a fingerprint are ambiguous and left out.
	byParams map[[32]byte]models.Model
}

// paramFingerprint digests the names and shapes of g's parameters.
func paramFingerprint(g *graph.Graph) [32]byte {
	h := sha256.New()
	for _, id := range g.Params() {
		t := g.Tensor(id)
		fmt.Fprintf(h, "%s %v\n", t.Name, t.Shape)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func loadZoo() {
	zoo.byParams = map[[32]byte]models.Model{}
	ambiguous := map[[32]byte]bool{}
	for _, m := range models.All() {
		if m.Family != "transformers" {
			continue
		}
		g, err := m.Build(models.Config{Batch: 1, Seq: 2})
		if err != nil {
			continue
		}
		fp := paramFingerprint(g)
		if _, dup := zoo.byParams[fp]; dup {
			ambiguous[fp] = true
		}
		zoo.byParams[fp] = m
	}
	for fp := range ambiguous {
		delete(zoo.byParams, fp)
	}
}

// zooMatch finds the zoo entry whose parameters are g's.
func zooMatch(g *graph.Graph) (models.Model, bool) {
	zoo.once.Do(loadZoo)
	m, ok := zoo.byParams[paramFingerprint(g)]
	return m, ok
}

// modelName is the name of the model at path: the directory holding a
// config.json, the directory itself, or the file name without ".json".
func modelName(path string) string {
	clean := filepath.Clean(path)
	if abs, err := filepath.Abs(clean); err == nil {
		clean = abs // "." and "config.json" name the working directory
	}
	base := filepath.Base(clean)
	if strings.EqualFold(base, "config.json") {
		if dir := filepath.Base(filepath.Dir(clean)); dir != "." && dir != string(filepath.Separator) && dir != "" {
			return dir
		}
		return "config"
	}
	return strings.TrimSuffix(base, ".json")
}
