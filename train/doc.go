// Package train simulates PyTorch eager training steps on a model graph and
// emits the memory Trace they produce.
//
// The simulator follows what PyTorch does, in order, for the loop
//
//	for x, y in loader:
//	    x, y = x.cuda(), y.cuda()      # the previous batch is freed after the new one lands
//	    with autocast():                # for the mixed precisions
//	        loss = loss_fn(model(x), y)
//	    scaler.scale(loss).backward()   # or loss.backward()
//	    if micro-step completes an accumulation: optimizer.step(); optimizer.zero_grad()
//
// Forward: every op allocates its output (views and in-place ops do not),
// registers the tensors autograd saves for backward (ops.go, the op table,
// is the one place that says which: it follows tools/autograd/derivatives.yaml),
// and every tensor is freed the moment nothing holds it any more — no
// consumer left in forward, no autograd node that saved it, no Python
// reference. Memory is counted per storage, as PyTorch counts it.
//
// Autocast (aten/src/ATen/autocast_mode.cpp): ops on the lower-precision list
// cast their floating inputs; parameter casts go through the weight-cast
// cache and live until the autocast region ends or the node that saved them
// runs in backward; ops on the fp32 list cast half inputs up.
//
// Backward runs the nodes in reverse creation order (the engine's
// ready-queue order by sequence number), allocating input gradients, freeing
// each node's saved tensors as it runs (release_variables), accumulating
// gradients that reach a tensor twice (in place when nobody else holds the
// buffer and the runtime profile says the release does so), and handing
// parameter gradients to AccumulateGrad, which steals the incoming gradient
// when .grad is unset (and copies it when the tensor is also handed
// elsewhere or laid out differently) and adds in place otherwise. As in the
// engine's evaluate_function, a node's outputs are handed on only after its
// apply() has returned and its saved tensors are released, so the node's
// own temporaries are gone by then.
//
// The optimizer step creates its state lazily at the first step and
// allocates the temporaries of the chosen implementation (for-loop, foreach,
// fused); zero_grad frees or zeroes the gradients according to the runtime
// profile. Several steps are simulated because the first differs from the
// rest.
//
// Activation checkpointing is torch.utils.checkpoint with use_reentrant=False
// around each block of the graph: the block's inputs are kept, nothing inside
// it is saved, and its forward is recomputed when backward reaches it.
package train
