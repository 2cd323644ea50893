package solve

import (
	"context"
	"fmt"

	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
)

// Plateau is how close to the best throughput a smaller batch must come
// to be preferred: past the knee of the curve more batch buys less than
// this, and costs memory.
const Plateau = 0.99

// Rate is the predicted throughput at one batch size.
type Rate struct {
	Batch            int64
	Seconds          float64
	SamplesPerSecond float64
	TokensPerSecond  float64
}

// Fastest is the batch that trains fastest among those that fit.
type Fastest struct {
	// Best is the smallest batch within Plateau of the best throughput;
	// Largest is the largest batch that fits (the search's answer).
	Best, Largest Rate
	// Curve lists the batches timed, ascending.
	Curve []Rate
}

// BestThroughput times the batch sizes up to the largest that fits (ans,
// from MaxBatch) and returns the fastest. Memory rises with the batch, so
// every smaller batch fits too; only the step-time model runs for them.
func BestThroughput(ctx context.Context, r predict.Request, ans *Answer) (*Fastest, error) {
	if ans == nil || ans.Dim != models.DimBatch || ans.Fit == nil || ans.Max <= 0 {
		return nil, fmt.Errorf("no batch fits: nothing to time")
	}
	if ans.Fit.Time == nil {
		return nil, fmt.Errorf("the step time of %s is not known (no peak rates; for a size given as --gpu, --like names the catalog GPU it is)", r.GPU.Name)
	}
	from, err := buildAt(r, ans.Max)
	if err != nil {
		return nil, err
	}
	var batches []int64
	for b := int64(1); b < ans.Max; b *= 2 {
		batches = append(batches, b)
		if m := b + b/2; b >= 2 && m < ans.Max {
			batches = append(batches, m)
		}
	}
	batches = append(batches, ans.Max)
	f := &Fastest{}
	for _, b := range batches {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := buildAt(r, b)
		if err != nil {
			return nil, err
		}
		setup := ans.Fit.Setup
		e, err := cost.Step(cost.Input{Graph: g, Ops: cost.Align(g, from, ans.Fit.Summary.Ops), Setup: setup, Rates: r.GPU.Rates,
			Seq: ans.Fit.Config.Seq, Batch: b})
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", b, err)
		}
		f.Curve = append(f.Curve, Rate{Batch: b, Seconds: e.Seconds, SamplesPerSecond: e.SamplesPerSecond(), TokensPerSecond: e.TokensPerSecond()})
	}
	top := 0.0
	for _, p := range f.Curve {
		top = max(top, p.SamplesPerSecond)
	}
	for _, p := range f.Curve {
		if p.SamplesPerSecond >= Plateau*top {
			f.Best = p
			break
		}
	}
	f.Largest = f.Curve[len(f.Curve)-1]
	return f, nil
}

func buildAt(r predict.Request, batch int64) (*graph.Graph, error) {
	c := r.Config
	c.Batch = batch
	if c.Seq == 0 {
		c.Seq = r.Source.DefaultSeq()
	}
	return r.Source.Build(c)
}
