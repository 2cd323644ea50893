package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// stepFigures are a one-step trace's bytes alive beside the parameters,
// buffers and batch: at the forward's end and the backward's, and at
// their peaks.
type stepFigures struct {
	fwdPeak, fwdEnd, bwdPeak, bwdEnd int64
}

func figuresOf(tr *trace.Trace) stepFigures {
	live, err := trace.LiveByStep(tr, trace.Parameter, trace.Buffer, trace.Batch)
	if err != nil || len(live) == 0 {
		return stepFigures{}
	}
	fw, bw := live[0].Phases[trace.Forward], live[0].Phases[trace.Backward]
	return stepFigures{fwdPeak: fw.Peak, fwdEnd: fw.End, bwdPeak: bw.Peak, bwdEnd: bw.End}
}

// simulateOne runs one SGD step of g under policy and returns its trace
// and summary.
func simulateOne(t *testing.T, g *graph.Graph, torch, policy string, cpu bool) (*trace.Trace, Summary) {
	t.Helper()
	ck, err := ParseCheckpoint(policy)
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := Simulate(g, Setup{CPU: cpu, Profile: mustProfile(t, torch), Steps: 1, Checkpoint: ck,
		Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	return tr, sum
}

// oneBlock is x [4, 8] through Linear("in", 8→8, no bias) and the block
// "l0" that body builds on its output, then Linear("head", 8→2) under
// cross-entropy: the block's input requires grad, so a reentrant
// checkpoint of it is not cut off.
func oneBlock(t *testing.T, body func(b *graph.Builder, h graph.TensorID) graph.TensorID) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("one")
	x := b.Input("x", graph.Shape{4, 8}, graph.F32)
	y := b.Target("y", graph.Shape{4}, graph.I64)
	h := b.Linear("in", x, 8, false)
	b.Block("l0", func() { h = body(b, h) })
	b.CrossEntropy("loss", b.Linear("head", h, 2, false), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLeafHeldByGraph: a zeros [1, 8] made to require grad and added to
// the block's input (T5's position bias under gradient checkpointing) is
// an autograd leaf. The AccumulateGrad node of the add keeps it as long as
// the graph, and its gradient (the [4, 8] gradient summed down to [1, 8],
// 32 bytes) becomes its .grad, kept with it: against the same zeros
// without requires_grad, 32 bytes more at the forward's end and 64 at the
// backward's, without checkpointing and without reentrance. Under
// reentrance the forward (no_grad) builds no node, and the recomputation's
// leaf and .grad go when CheckpointFunction.backward returns: no
// difference at either end.
func TestLeafHeldByGraph(t *testing.T) {
	build := func(leaf bool) *graph.Graph {
		return oneBlock(t, func(b *graph.Builder, h graph.TensorID) graph.TensorID {
			var z graph.TensorID
			if leaf {
				z = b.Leaf("bias", h, graph.F32, 1, 8)
			} else {
				z = b.Const("bias", h, graph.F32, 1, 8)
			}
			return b.Act(graph.ReLU, "relu", b.Add("add", h, z), false)
		})
	}
	for _, c := range []struct {
		policy           string
		fwdEnd, backward int64
	}{
		{"none", 32, 64},
		{"full", 32, 64},
		{"full-reentrant", 0, 0},
	} {
		trL, _ := simulateOne(t, build(true), "2.5", c.policy, true)
		trC, _ := simulateOne(t, build(false), "2.5", c.policy, true)
		l, k := figuresOf(trL), figuresOf(trC)
		if l.fwdEnd-k.fwdEnd != c.fwdEnd || l.bwdEnd-k.bwdEnd != c.backward {
			t.Errorf("%s: the leaf adds %+d B at the forward's end and %+d B at the backward's; want %+d and %+d",
				c.policy, l.fwdEnd-k.fwdEnd, l.bwdEnd-k.bwdEnd, c.fwdEnd, c.backward)
		}
	}
	g := build(true)
	for _, policy := range []string{"hf", "hf-non-reentrant", "full-reentrant"} {
		ck, err := ParseCheckpoint(policy)
		if err != nil {
			t.Fatal(err)
		}
		a := AutogradGraph(g, ck)
		for _, op := range a.Ops {
			if op.Name == "l0.bias" && !a.Tensors[op.Output].RequiresGrad {
				t.Errorf("%s: the leaf requires no grad in the autograd graph", policy)
			}
		}
	}
}

// TestRecomputationHoldsReturns: the block makes p = h * 2 first and
// returns it beside relu(fc(p + h)), and the head reads both. Without
// reentrance the recomputation runs the function, which holds p to the
// end (it returns it) although nothing inside reads it after the add:
// the recomputed p goes when the recomputation stops, after the ReLU
// made its output, not at the add.
func TestRecomputationHoldsReturns(t *testing.T) {
	b := graph.NewBuilder("returns")
	x := b.Input("x", graph.Shape{4, 8}, graph.F32)
	y := b.Target("y", graph.Shape{4}, graph.I64)
	h := b.Linear("in", x, 8, false)
	var p, r graph.TensorID
	b.Block("l0", func() {
		p = b.Scale("twice", h)
		r = b.Act(graph.ReLU, "relu", b.Linear("fc", b.Add("add", p, h), 8, false), false)
	})
	b.CrossEntropy("loss", b.Linear("head", b.Add("sum", r, p), 2, false), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := simulateOne(t, g, "2.5", "full", true)
	made, freed, relu := int64(-1), -1, -1
	for i, e := range tr.Events {
		if e.Phase != trace.Backward || e.Site < 0 {
			continue
		}
		switch site := tr.Sites[e.Site]; {
		case e.Action == trace.Alloc && site == "l0.twice" && made < 0:
			made = e.ID
		case e.Action == trace.Free && e.ID == made && freed < 0:
			freed = i
		case e.Action == trace.Alloc && site == "l0.relu" && relu < 0:
			relu = i
		}
	}
	if made < 0 || relu < 0 || freed < relu {
		t.Errorf("the recomputed p goes at event %d, the ReLU's output is made at %d; want it held past the ReLU", freed, relu)
	}
}
