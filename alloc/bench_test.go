package alloc

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batchfit/batchfit/trace"
)

// syntheticTrace builds a trace shaped like eager PyTorch training of a
// 24-layer transformer: parameters up front, then steps of forward (saved
// activations plus short-lived temporaries), backward (activations freed
// last-in first-out, gradients allocated), an Adam-like optimizer step with
// per-parameter temporaries, and zero_grad. Sizes run from a few bytes to
// hundreds of MiB. It stops at about n events.
func syntheticTrace(n int) *trace.Trace {
	r := rand.New(rand.NewPCG(42, 1))
	t := &trace.Trace{Events: make([]trace.Event, 0, n+10000)}
	id := int64(0)
	add := func(size int64, c trace.Category, ph trace.Phase, step int32) int64 {
		id++
		t.Events = append(t.Events, trace.Event{Action: trace.Alloc, ID: id, Size: size, Category: c, Phase: ph, Step: step, Site: -1})
		return id
	}
	del := func(i int64, ph trace.Phase, step int32) {
		t.Events = append(t.Events, trace.Event{Action: trace.Free, ID: i, Phase: ph, Step: step, Site: -1})
	}
	const h = 2048
	var params []int64
	var paramSizes []int64
	p := func(size int64) {
		params = append(params, add(size, trace.Parameter, trace.Setup, 0))
		paramSizes = append(paramSizes, size)
	}
	p(50257 * h * 4) // embedding, ~393 MiB
	for l := 0; l < 24; l++ {
		p(3 * h * h * 4) // qkv
		p(3 * h * 4)
		p(h * h * 4) // out proj
		p(h * 4)
		p(4 * h * h * 4) // mlp up
		p(4 * h * 4)
		p(4 * h * h * 4) // mlp down
		p(h * 4)
		p(h * 4) // layer norms
		p(h * 4)
	}
	var state []int64
	for step := int32(0); len(t.Events) < n; step++ {
		batch := int64(4 + r.IntN(2)) // batch size wobbles like bucketed inputs
		tok := batch * 512
		in := add(tok*8, trace.Batch, trace.Forward, step)
		var saved []int64
		for l := 0; l < 24; l++ {
			for k := 0; k < 8; k++ {
				saved = append(saved, add(tok*h*2*int64(1+k%4), trace.Activation, trace.Forward, step))
				// temporaries: some tiny (scalars, shapes), some large
				tmp := add(int64(4+r.IntN(4096)), trace.Transient, trace.Forward, step)
				big := add(tok*h*int64(1+r.IntN(4)), trace.Transient, trace.Forward, step)
				del(big, trace.Forward, step)
				del(tmp, trace.Forward, step)
			}
			saved = append(saved, add(batch*16*512*512*2, trace.Activation, trace.Forward, step)) // attention scores
		}
		loss := add(4, trace.Transient, trace.Loss, step)
		grads := make([]int64, len(params))
		pi := len(params) - 1
		for i := len(saved) - 1; i >= 0; i-- {
			g := add(tok*h*2, trace.Transient, trace.Backward, step)
			if i%9 == 0 && pi >= 0 {
				for j := 0; j < 3 && pi >= 0; j++ {
					grads[pi] = add(paramSizes[pi], trace.Gradient, trace.Backward, step)
					pi--
				}
			}
			del(saved[i], trace.Backward, step)
			del(g, trace.Backward, step)
		}
		for ; pi >= 0; pi-- {
			grads[pi] = add(paramSizes[pi], trace.Gradient, trace.Backward, step)
		}
		del(loss, trace.Backward, step)
		del(in, trace.Backward, step)
		if state == nil {
			for _, s := range paramSizes {
				state = append(state, add(s, trace.OptimizerState, trace.OptimizerStep, step), add(s, trace.OptimizerState, trace.OptimizerStep, step))
			}
		}
		for i, s := range paramSizes {
			tmp := add(s, trace.Transient, trace.OptimizerStep, step)
			del(tmp, trace.OptimizerStep, step)
			del(grads[i], trace.ZeroGrad, step)
		}
		t.Events = append(t.Events, trace.Event{Action: trace.StepEnd, Step: step, Site: -1})
	}
	return t
}

func BenchmarkReplay(b *testing.B) {
	t := syntheticTrace(3_000_000)
	dev := Device{Capacity: 79 * GiB, Total: 80 * GiB}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		tl, err := Replay(t, Config{}, dev, ReplayOptions{})
		if err != nil || tl.OOM != nil {
			b.Fatal(err, tl.OOM)
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(t.Events))/time.Since(start).Seconds(), "events/s")
}

func BenchmarkReplayExpandable(b *testing.B) {
	t := syntheticTrace(3_000_000)
	dev := Device{Capacity: 79 * GiB, Total: 80 * GiB}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := Replay(t, Config{ExpandableSegments: true}, dev, ReplayOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(t.Events))/time.Since(start).Seconds(), "events/s")
}

func TestSyntheticTraceReplays(t *testing.T) {
	tr := syntheticTrace(200_000)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{{}, {ExpandableSegments: true}, {MaxSplitSize: 256 * MiB}} {
		tl, err := Replay(tr, cfg, Device{Capacity: 79 * GiB, Total: 80 * GiB}, ReplayOptions{})
		if err != nil || tl.OOM != nil {
			t.Fatal(err, tl.OOM)
		}
		if tl.PeakAllocated > tl.PeakReserved || len(tl.Steps) < 2 {
			t.Errorf("%v: peaks %d/%d, %d steps", cfg, tl.PeakAllocated, tl.PeakReserved, len(tl.Steps))
		}
		var sum int64
		for _, v := range tl.AtPeak {
			sum += v
		}
		if sum != tl.PeakAllocated {
			t.Errorf("%v: categories at peak sum to %d, peak %d", cfg, sum, tl.PeakAllocated)
		}
	}
}
