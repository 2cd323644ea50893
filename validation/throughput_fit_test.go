//go:build calibrate

package validation_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/validation"
)

// TestThroughputFit fits the step-time model's two constants of each
// architecture (gpu.Achievable: the matmul and the bandwidth shares) on
// the calibration set's rows whose model batchfit builds exactly, by grid
// search within the ranges the sources give (matmul 0.50–0.90: cuBLAS's
// large GEMMs reach 0.7–0.9 and cuDNN's implicit-GEMM convolutions less;
// bandwidth 0.70–0.93: STREAM-like copies reach 0.8–0.93 and reductions
// such as batch norm less), minimising the median
// |error| of samples/s of the architecture's rows. It prints the fit and
// changes nothing: the catalog carries the figures (gpu/catalog.go).
//
//	go test -tags calibrate -run ThroughputFit -v ./validation
func TestThroughputFit(t *testing.T) {
	rows := loadThroughputSets(t)
	byFamily := map[string][]validation.ThroughputRow{}
	for _, r := range rows {
		if !r.Exact {
			continue
		}
		g, err := gpu.Lookup(r.GPU)
		if err != nil {
			t.Fatal(err)
		}
		f := fmt.Sprintf("sm_%d%d", g.Major, g.Minor)
		byFamily[f] = append(byFamily[f], r)
	}
	var fams []string
	for f := range byFamily {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		best, bm, bb := math.Inf(1), 0.0, 0.0
		for mm := 0.50; mm <= 0.901; mm += 0.025 {
			for _, bw := range []float64{0.70, 0.75, 0.80, 0.85, 0.90, 0.93} {
				var errs []float64
				for _, r := range byFamily[f] {
					p, err := fitPredict(r, gpu.Achievable{Matmul: mm, Bandwidth: bw})
					if err != nil {
						t.Fatal(err)
					}
					errs = append(errs, math.Abs(p-r.Throughput)/r.Throughput)
				}
				sort.Float64s(errs)
				m := errs[len(errs)/2]
				if len(errs)%2 == 0 {
					m = (m + errs[len(errs)/2-1]) / 2
				}
				if m < best {
					best, bm, bb = m, mm, bw
				}
			}
		}
		t.Logf("%-10s %2d rows: matmul %.2f, bandwidth %.2f: median |error| %.1f %%", f, len(byFamily[f]), bm, bb, 100*best)
	}
}

func fitPredict(r validation.ThroughputRow, a gpu.Achievable) (float64, error) {
	req, err := validation.ThroughputRequest(r)
	if err != nil {
		return 0, err
	}
	req.GPU.Rates.Achievable = a
	res, err := predict.Run(context.Background(), req)
	if err != nil {
		return 0, err
	}
	if res.Time == nil {
		return 0, fmt.Errorf("%s: no step time", r.ID)
	}
	return res.Time.SamplesPerSecond(), nil
}

// TestThroughputBound prints what the roofline bound (cost.Bound) makes
// of the same rows, for docs/accuracy.md §4.1's comparison.
//
//	go test -tags calibrate -run ThroughputBound -v ./validation
func TestThroughputBound(t *testing.T) {
	rows := loadThroughputSets(t)
	var exact, all []float64
	for _, r := range rows {
		req, err := validation.ThroughputRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		res, err := predict.Run(context.Background(), req)
		if err != nil || res.Time == nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		ratio := res.Time.BoundSamplesPerSecond() / r.Throughput
		all = append(all, ratio)
		if r.Exact {
			exact = append(exact, ratio)
		}
	}
	med := func(v []float64) float64 {
		sort.Float64s(v)
		if len(v)%2 == 0 {
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return v[len(v)/2]
	}
	t.Logf("the bound's samples/s over the measured: median %.2f× on the %d exact rows, %.2f× on all %d", med(exact), len(exact), med(all), len(all))
}
