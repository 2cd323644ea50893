package train

import "github.com/batchfit/batchfit/trace"

// The CPU batch norm in training, as aten runs it
// (aten/src/ATen/native/Normalization.cpp: batch_norm_cpu,
// batch_norm_cpu_update_stats_template, batch_norm_backward_cpu_template;
// aten/src/ATen/native/cpu/batch_norm_kernel.cpp), for a contiguous input.
// Measured on 1.13 and 2.5.1 with one batch norm at a time
// (profile_memory), one intra-op thread as the CPU references run:
//
//   - forward: save_mean and save_invstd [C], which the node keeps; then
//     update_stats' _mean and _var_sum [C], freed once the statistics are
//     in, and where each channel holds one value per sample (N×C×1×1,
//     BatchNorm1d's N×C: "NC11 is also channels last") the
//     channels-last reduction's at::zeros({num_threads, C}) buffer beside
//     them; then the transform's alpha and beta [C]
//     (batch_norm_cpu_contiguous_impl, batch_norm_cpu_channels_last_impl),
//     freed when it returns. 2.0 and later make the output first and hand
//     it down (native_batch_norm.out); 1.13 makes it in the transform,
//     after the statistics (profile.BatchNormCPUStatsFirst);
//   - backward: grad_input = empty_like(input), grad_weight, grad_bias,
//     then, where the input and the incoming gradient are both contiguous,
//     a second grad_input = empty_like(input,
//     suggest_memory_format_contig(input)) that replaces the first, which
//     goes only then: two input-sized tensors at once. The NC11 kernel
//     (batch_norm_cpu_backward_channels_last_impl) then sums into
//     at::zeros({2, num_threads, C}). A strided gradient takes the
//     generic path: one grad_input, and at::sum(grad_out) [C].
//
// The statistics are float32 as the saved ones (a CPU run in float32);
// each further intra-op thread would add a row to the buffers. A
// channels-last input (the channels-last kernels' buffers at any image
// size) is not told apart.

// batchNormCPU says the op is a CPU batch norm in training.
func batchNormCPU(c *fwdCtx) bool { return c.m.sim.s.CPU && !c.m.sim.noGrad }

// batchNormNC11 says each channel holds one value per sample, so the
// contiguous kernels take the channels-last path.
func batchNormNC11(numel, n, ch int64) bool { return n*ch > 0 && numel/(n*ch) == 1 }

// batchNormCPUPre makes 1.13's statistics before the output.
func batchNormCPUPre(c *fwdCtx) {
	if batchNormCPU(c) && c.m.sim.s.Profile.BatchNormCPUStatsFirst {
		batchNormCPUStats(c)
	}
}

// batchNormCPUStats makes save_mean and save_invstd (c.stats) and the
// update's temporaries, which it frees.
func batchNormCPUStats(c *fwdCtx) {
	s := c.shape(0)
	stat := s[1] * 4
	c.stats = []*storage{c.local(stat, trace.Activation), c.local(stat, trace.Activation)}
	tmp := []*storage{c.local(stat, trace.Transient), c.local(stat, trace.Transient)}
	if batchNormNC11(s.Numel(), s[0], s[1]) {
		tmp = append(tmp, c.local(stat, trace.Transient))
	}
	for _, st := range tmp {
		c.drop(st)
	}
}

// batchNormCPUForward runs after the output is made: the statistics
// (unless 1.13 made them first), which the node saves, and the
// transform's alpha and beta, freed when the op returns.
func batchNormCPUForward(c *fwdCtx) {
	if c.stats == nil {
		batchNormCPUStats(c)
	}
	for _, st := range c.stats {
		c.save(value{st: st})
	}
	stat := c.shape(0)[1] * 4
	c.local(stat, trace.Transient)
	c.local(stat, trace.Transient)
}

// batchNormCPUBackward is native_batch_norm_backward on the CPU.
func batchNormCPUBackward(c *bwdCtx) {
	s := c.m.g.Tensors[c.op.Inputs[0]].Shape
	stat := s[1] * 4
	if c.stridedGrad() {
		c.gradIn(0)
		c.gradParam(c.op.Weight)
		c.gradParam(c.op.Bias)
		c.temp(stat)
		return
	}
	var first *storage
	if c.needs(0) {
		first = c.alloc(s.Numel() * c.inDT(0).Size())
	}
	c.gradParam(c.op.Weight)
	c.gradParam(c.op.Bias)
	c.gradIn(0)
	c.m.sim.unref(first)
	if first != nil && batchNormNC11(s.Numel(), s[0], s[1]) {
		c.temp(2 * stat)
	}
}
