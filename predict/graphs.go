package predict

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// Graphs keeps the graphs a search builds, one per configuration, so that
// its predictions and timings build each graph once (a Llama layer stack
// takes milliseconds to build, as long as a tenth of a prediction). A
// prediction never changes a graph it is given: the one that must (FSDP's
// flat parameters) changes a copy. Not safe for concurrent use.
type Graphs struct {
	m map[string]*graph.Graph
	// valid holds the graphs that passed graph.Validate
	valid map[*graph.Graph]bool
}

// NewGraphs returns an empty cache.
func NewGraphs() *Graphs {
	return &Graphs{m: map[string]*graph.Graph{}, valid: map[*graph.Graph]bool{}}
}

// simulator starts a simulation of g, validating g once for the search
// (nil Graphs: every time).
func (gs *Graphs) simulator(g *graph.Graph, s train.Setup) (*train.Simulator, error) {
	if gs == nil {
		return train.New(g, s)
	}
	if !gs.valid[g] {
		if err := g.Validate(); err != nil {
			return nil, err
		}
		gs.valid[g] = true
	}
	return train.NewValidated(g, s)
}

// Build answers src's graph for c, building it the first time.
func (gs *Graphs) Build(src Source, c models.Config) (*graph.Graph, error) {
	if gs == nil {
		return src.Build(c)
	}
	k := graphKey(src, c)
	if g, ok := gs.m[k]; ok {
		return g, nil
	}
	g, err := src.Build(c)
	if err != nil {
		return nil, err
	}
	gs.m[k] = g
	return g, nil
}

// graphKey names a configuration by value: the pointers' contents, not
// their addresses.
func graphKey(src Source, c models.Config) string {
	// no tensor parallelism is 0 or 1, no pipeline likewise, and a
	// stage means nothing without one
	if c.TP <= 1 {
		c.TP = 0
	}
	if c.PP <= 1 {
		c.PP, c.Stage = 0, 0
	}
	a, q, d := c.Adapters, c.Quant, c.Decode
	c.Adapters, c.Quant, c.Decode = nil, nil, nil
	s := fmt.Sprintf("%s\x00%+v", src.Name(), c)
	if a != nil {
		s += fmt.Sprintf("\x00a%+v", *a)
	}
	if q != nil {
		s += fmt.Sprintf("\x00q%+v", *q)
	}
	if d != nil {
		s += fmt.Sprintf("\x00d%+v", *d)
	}
	return s
}
