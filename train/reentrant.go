package train

import (
	"slices"

	"github.com/batchfit/batchfit/graph"
)

// AutogradGraph returns g as autograd sees it under checkpointing
// policy c, or g itself where that changes nothing.
//
// A graph's RequiresGrad is fixed when it is built: an op's output
// requires grad when a differentiable input does. Two of checkpointing's
// rules change that:
//
//   - torch.utils.checkpoint(use_reentrant=True) is an autograd.Function,
//     CheckpointFunction, whose forward runs the region under no_grad. A
//     Function's outputs require grad only when one of the tensors it is
//     handed does (THPFunction_apply: is_executable is grad mode and
//     any_variable_requires_grad of its inputs); the region's parameters
//     are not among them. So a region whose arguments need no gradient
//     (a first layer reading the batch) makes outputs that need none: its
//     parameters get no gradient from it and the regions after it, handed
//     those outputs, are cut off in turn. checkpoint() warns "None of the
//     inputs have requires_grad=True. Gradients will be None" and the
//     model trains what lies outside the regions only; a parameter that
//     gets no gradient from anywhere is skipped by the optimizer
//     (_init_group keeps the parameters whose grad is not None), as a
//     frozen one.
//   - transformers' and PEFT's checkpointing (c.Library) make the input
//     embeddings' output require grad (inputEmbeddings), and what reads
//     it after: PeftModel.__init__ calls
//     _prepare_model_for_gradient_checkpointing, and gradient_checkpointing_
//     enable with adapters loaded calls it too, whose
//     enable_input_require_grads registers a forward hook calling
//     output.requires_grad_(True) on get_input_embeddings() (peft/
//     peft_model.py; transformers modeling_utils.py), "so that the
//     reentrant layers' adapter weights get their gradients". With the
//     embeddings trained the output requires grad already.
//
// Only the first changes which regions train; a region whose ops make
// nothing that requires grad (a frozen stack without reentrance as much as
// a cut-off one with it) keeps nothing for backward either: no tensor is
// packed, so neither the call's frame nor CheckpointFunction's ctx (freed
// when apply returns without a node) holds its inputs or generator state.
//
// Under any policy, a parameter that no op whose output requires grad
// reads gets no gradient (its .grad stays None: a module's bias the
// forward never uses, a layer it skips), and the optimizer skips it as a
// frozen one.
func AutogradGraph(g *graph.Graph, c Checkpoint) *graph.Graph {
	var rg []bool
	if c.On() && (c.Reentrant || c.Library) {
		rg = requiresGradUnder(g, c)
	}
	return withUnusedFrozen(g, rg)
}

// requiresGradUnder is each tensor's requires-grad under checkpointing
// policy c (AutogradGraph's first two rules).
func requiresGradUnder(g *graph.Graph, c Checkpoint) []bool {
	region, n := Regions(g, c)
	rg := make([]bool, len(g.Tensors))
	// from[t] is the region of the op that makes t, -1 outside any,
	// -2 for a tensor no op makes
	from := make([]int32, len(g.Tensors))
	for i := range from {
		from[i] = -2
	}
	for i, op := range g.Ops {
		from[op.Output] = region[i]
	}
	for i := range g.Tensors {
		if from[i] == -2 {
			rg[i] = g.Tensors[i].RequiresGrad
		}
	}
	// live[r]: the region's call is handed a tensor that requires grad
	live := make([]int8, n) // 0 unknown, 1 live, -1 cut off
	hooked := int32(-1)
	if c.Library {
		hooked = inputEmbeddings(g, region)
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		out := op.Output
		r := region[i]
		if c.Reentrant && r >= 0 && live[r] == 0 {
			live[r] = -1
			for j := i; j < len(g.Ops) && region[j] == r; j++ {
				if g.Ops[j].Kind == graph.Release {
					continue // Python letting go, no argument
				}
				for _, t := range g.Ops[j].Inputs {
					if from[t] == r {
						continue
					}
					if g.Tensors[t].Role != graph.Parameter && rg[t] {
						live[r] = 1
					}
				}
			}
		}
		switch {
		case c.Reentrant && r >= 0 && live[r] < 0:
			rg[out] = false
		case g.Tensors[out].Leaf:
			// a leaf that requires grad of its own (torch.zeros with
			// .requires_grad = True), whatever its op reads
			rg[out] = g.Tensors[out].RequiresGrad
		case int32(i) == hooked:
			rg[out] = g.Tensors[out].DType.IsFloat()
		default:
			rg[out] = differentiable(g, op) && anyRequiresGrad(op, rg)
		}
	}
	return rg
}

// withUnusedFrozen is g with requires-grad rg (g's own where nil) and no
// requires-grad on the parameters that no op whose output requires grad
// reads; g itself where that changes nothing.
func withUnusedFrozen(g *graph.Graph, rg []bool) *graph.Graph {
	if rg == nil {
		rg = make([]bool, len(g.Tensors))
		for i := range g.Tensors {
			rg[i] = g.Tensors[i].RequiresGrad
		}
	}
	// a parameter keeps requiring grad where an op whose output does
	// reads it
	used := make([]bool, len(g.Tensors))
	for i := range g.Ops {
		op := &g.Ops[i]
		if !rg[op.Output] {
			continue
		}
		for _, t := range append([]graph.TensorID{op.Weight, op.Bias}, op.Inputs...) {
			if t != graph.None {
				used[t] = true
			}
		}
	}
	changed := false
	for i := range g.Tensors {
		t := &g.Tensors[i]
		want := rg[i]
		if t.Role == graph.Parameter {
			want = t.RequiresGrad && used[i]
		}
		if want != t.RequiresGrad {
			changed = true
			break
		}
	}
	if !changed {
		return g
	}
	cp := *g
	cp.Tensors = slices.Clone(g.Tensors)
	for i := range cp.Tensors {
		t := &cp.Tensors[i]
		if t.Role == graph.Parameter {
			t.RequiresGrad = t.RequiresGrad && used[i]
		} else {
			t.RequiresGrad = rg[i]
		}
	}
	return &cp
}

// inputEmbeddings is the op whose output transformers' and PEFT's
// make_inputs_require_grads hook marks: get_input_embeddings() is the
// token embedding of a language model (the graph's first nn.Embedding)
// and the patch embedding of a vision one (with no nn.Embedding, the first
// op that reads the batch), when it runs before the first checkpointed
// region; -1 when there is none.
func inputEmbeddings(g *graph.Graph, region []int32) int32 {
	first := int32(-1)
	for i := range g.Ops {
		op := &g.Ops[i]
		if region[i] >= 0 {
			break
		}
		if op.Kind == graph.Embedding {
			return int32(i)
		}
		if first < 0 && g.Tensors[op.Output].DType.IsFloat() {
			for _, t := range op.Inputs {
				if g.Tensors[t].Role == graph.Input {
					first = int32(i)
					break
				}
			}
		}
	}
	for i := range g.Ops {
		if g.Ops[i].Kind == graph.Embedding {
			return -1 // an embedding inside the layers: not the input's
		}
	}
	return first
}

// differentiable is whether op's output can require grad: a float result
// of an op autograd records (not a factory or a comparison), and not one
// the build marked as needing none although an input needs it (made under
// no_grad, or a result autograd does not differentiate).
func differentiable(g *graph.Graph, op *graph.Op) bool {
	out := &g.Tensors[op.Output]
	if !out.DType.IsFloat() || op.Kind == graph.Full || op.Kind == graph.Rand || op.Kind == graph.Compare {
		return false
	}
	if out.RequiresGrad {
		return true
	}
	for _, t := range append([]graph.TensorID{op.Weight, op.Bias}, op.Inputs...) {
		if t != graph.None && g.Tensors[t].RequiresGrad {
			return false
		}
	}
	return true
}

func anyRequiresGrad(op *graph.Op, rg []bool) bool {
	for _, t := range append([]graph.TensorID{op.Weight, op.Bias}, op.Inputs...) {
		if t != graph.None && rg[t] {
			return true
		}
	}
	return false
}

// DeadRegions marks the regions none of whose ops makes a tensor that
// requires grad. Such a call keeps nothing: with reentrance
// CheckpointFunction's ctx goes when apply returns without a node; without
// it, _NoopSaveInputs' node holds the arguments only through the
// _CheckpointFrame, which no packed tensor holds, so it goes, generator
// state and all, when the call returns (torch/utils/checkpoint.py,
// _checkpoint_without_reentrant_generator).
func DeadRegions(g *graph.Graph, region []int32, n int32) []bool {
	if n == 0 {
		return nil
	}
	dead := make([]bool, n)
	for i := range dead {
		dead[i] = true
	}
	for i := range g.Ops {
		if r := region[i]; r >= 0 && g.Tensors[g.Ops[i].Output].RequiresGrad {
			dead[r] = false
		}
	}
	return dead
}

// CutOff reports what reentrant checkpointing leaves untrained in g under
// c (AutogradGraph): the regions whose call is handed no tensor that
// requires grad while their ops would make some without the checkpoint,
// of how many regions, and the elements of the parameters that then get
// no gradient. PyTorch warns of each such call ("None of the inputs have
// requires_grad=True. Gradients will be None", torch/utils/checkpoint.py).
func CutOff(g *graph.Graph, c Checkpoint) (cut, regions int32, params int64) {
	if !c.Reentrant {
		return 0, 0, 0
	}
	a := AutogradGraph(g, c)
	// what trains without the policy (a parameter nothing reads trains
	// under none)
	g = AutogradGraph(g, Checkpoint{})
	region, n := Regions(g, c)
	was, is := make([]bool, n), make([]bool, n)
	for i := range g.Ops {
		if r := region[i]; r >= 0 {
			was[r] = was[r] || g.Tensors[g.Ops[i].Output].RequiresGrad
			is[r] = is[r] || a.Tensors[g.Ops[i].Output].RequiresGrad
		}
	}
	for r := range was {
		if was[r] && !is[r] {
			cut++
		}
	}
	if cut == 0 {
		return 0, 0, 0
	}
	for i := range g.Tensors {
		if g.Tensors[i].Role == graph.Parameter && g.Tensors[i].RequiresGrad && !a.Tensors[i].RequiresGrad {
			params += g.Tensors[i].Shape.Numel()
		}
	}
	return cut, n, params
}
