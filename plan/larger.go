package plan

import (
	"context"
	"slices"
	"sort"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/predict"
)

// Elsewhere is a larger GPU on which a plan was simulated and fits.
type Elsewhere struct {
	GPU gpu.GPU
	// Margin is the headroom held on GPU (the job's margin taken of that
	// GPU's own capacity).
	Margin int64
	// Plan fits on GPU with Margin free; its Result is its prediction on
	// GPU. Of the plans known to fit there, it is the one with the least
	// device total.
	Plan *Plan
}

// Larger looks for the GPUs of gpus larger than the job's (by capacity)
// on which a plan fits, and returns them smallest first, each with the
// plan that needs the least there. A GPU is named only for a plan
// simulated on it: what a step needs is not the same on every GPU (the
// CUDA context, kernels that follow the compute capability, the margin
// taken of its own capacity), and whether a plan fits is known only from
// its replay.
//
// The GPUs are taken largest first. The largest is searched as Run
// searches the job's own GPU (the fewest changes, one plan); on each
// smaller one the plans that fitted on the larger ones are predicted
// first, least device total first (screened: predict.Request.Screen rules
// out one whose requested bytes exceed the device without a replay), and
// only when none fits is the GPU searched. The first GPU on which nothing
// fits ends the walk: the GPUs below it are not searched, and are not
// named. margin gives the headroom to hold on a GPU; a GPU it refuses is
// skipped. Each search is held to o.MaxPredictions. searched lists the
// GPUs on which a search or a plan was simulated; stopped those whose
// search stopped at the budget without a fit.
func Larger(ctx context.Context, o Options, gpus []gpu.GPU, margin func(gpu.GPU) (int64, error)) (fits []Elsewhere, searched, stopped []string, err error) {
	var larger []gpu.GPU
	for _, g := range gpus {
		if g.Capacity > o.Base.GPU.Capacity {
			larger = append(larger, g)
		}
	}
	sort.SliceStable(larger, func(i, j int) bool { return larger[i].Capacity > larger[j].Capacity })
	// known are the plans that fitted on a larger GPU, each with the
	// request that predicts it (on the GPU it was found on)
	type known struct {
		p   *Plan
		req predict.Request
	}
	var carry []known
	for _, g := range larger {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		m, err := margin(g)
		if err != nil {
			continue
		}
		var best *Plan
		for _, k := range carry {
			r := k.req
			r.GPU, r.Margin, r.Context, r.Screen = g, m, -1, true
			if o.MarginFor != nil {
				// the plan's own band, taken of this GPU
				own, err := o.MarginFor(r)
				if err != nil {
					continue
				}
				r.Margin = max(own, m)
			}
			res, err := predict.Run(ctx, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, nil, ctx.Err()
				}
				continue
			}
			if !res.Screened && res.Fits {
				p := &Plan{Candidate: k.p.Candidate, Changes: k.p.Changes, Result: res, Fits: true}
				if res.Time != nil {
					p.Seconds = res.Time.Seconds
				}
				best = p
				break
			}
		}
		if best == nil {
			og := o
			og.Base.GPU = g
			// a context given for the job's GPU is that GPU's: another
			// one takes its catalog figure
			og.Base.Context = -1
			og.Margin = m
			og.Top = 1
			og.Objective = FewestChanges
			ans, err := Run(ctx, og)
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, nil, ctx.Err()
				}
				// a GPU the job cannot be planned on as described: it
				// is not named
				continue
			}
			var found []known
			for _, p := range ans.Evaluated {
				if p.Fits {
					found = append(found, known{p, ans.request(p.Candidate)})
				}
			}
			sort.SliceStable(found, func(i, j int) bool { return found[i].p.Result.DeviceTotal < found[j].p.Result.DeviceTotal })
			if len(found) == 0 {
				searched = append(searched, g.Name)
				if ans.Stopped {
					stopped = append(stopped, g.Name)
				}
				break
			}
			best = found[0].p
			// the least device total first: the likeliest to fit below
			carry = append(found, carry...)
			sort.SliceStable(carry, func(i, j int) bool { return carry[i].p.Result.DeviceTotal < carry[j].p.Result.DeviceTotal })
		}
		searched = append(searched, g.Name)
		fits = append(fits, Elsewhere{GPU: g, Margin: best.Result.Margin, Plan: best})
	}
	slices.Reverse(fits)
	slices.Reverse(searched)
	return fits, searched, stopped, nil
}
