package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// cuDNN convolution workspaces on the GPU, the one place these rules live.
// Sources: aten/src/ATen/native/cudnn/Conv_v7.cpp (torch 1.13) and
// Conv_v8.cpp (the default from 2.0; see profile.CudnnConvAPI).
//
// Every kernel, forward, backward-data and backward-filter, takes its
// workspace from the caching allocator right before it runs and gives it
// back when it returns: Conv_v7.cpp's try_all lambdas hold
// allocate_workspace(perf.memory) (an at::empty byte tensor) for one
// cudnnConvolutionForward / BackwardData / BackwardFilter call;
// Conv_v8.cpp's run_conv_plan holds
// CUDACachingAllocator::get()->allocate(plan.getWorkspaceSize()) for one
// cudnnBackendExecute. The output (or grad_input, grad_weight) is
// allocated before it, so the workspace sits beside it.
//
// How large it is depends on the algorithm cuDNN's heuristic ranks
// first (cudnnGetConvolution*Algorithm_v7, or the v8 engine heuristics in
// CUDNN_HEUR_MODE_INSTANT), which PyTorch allocates as asked; the release's
// profile says which figure stands for it (profile.CudnnConvWorkspace):
//
//   - "explicit_gemm" (1.13 to 2.5): the workspace of the explicit-GEMM
//     algorithm (CUDNN_CONVOLUTION_FWD_ALGO_GEMM), the whole unfolded
//     input, N × C × kh × kw × oh × ow elements, as large as
//     _slow_conv2d's im2col buffer. The heuristic normally picks an
//     implicit-GEMM or Winograd kernel that needs less; FFT kernels can
//     need more (docs/accuracy.md says so).
//   - "nhwc_transform" (2.11, which bundles cuDNN 9.19): the engine the
//     heuristic ranks first runs on the tensor cores, which read NHWC,
//     so cuDNN transposes the NCHW input and output and the KCRS weight
//     into its workspace (the cuDNN developer guide: "padding, folding,
//     and NCHW-to-NHWC transformations to call the Tensor Core
//     operations"). The workspace is the three copies' bytes: the input
//     (or its gradient), the output (or its gradient), and the weight
//     unless the kernel is 1×1, where KCRS and KRSC are one layout. On an
//     H200 under 2.11 (testdata/measured/snapshots/resnet18-b32-fp32-
//     adamw.pickle.gz) 30 of the 36 forward and backward-data workspaces
//     of a step are these bytes plus 16 (or 147), 5 lack the output's
//     copy; the backward-filter ones add whole multiples of the weight
//     gradient's bytes (3 or 14 for ResNet-18's 3×3 layers, split-K
//     partial sums by their form), which no shape rule gives: the figure
//     is near what runs, a little below it at a backward-filter kernel.
//     Where the tensor cores do not run (float32 without TF32, or on a GPU
//     older than Ampere; float16 before Volta; bfloat16 before Ampere)
//     nothing is transposed and the explicit-GEMM figure stands; where
//     the tensors are already channels-last nothing is transposed either.
//
// Both paths catch an out-of-memory error for the workspace and try the
// next algorithm (Conv_v7.cpp AlgoIterator::try_all, Conv_v8.cpp
// try_configs and try_plans), caching the one that ran per configuration,
// so a workspace never fails a step. Each workspace allocation is
// therefore marked to fall back (trace.Event.Fallback) under its
// benchmark-cache entry, and the allocator's replay decides, as PyTorch
// does at run time, whether the workspace is taken or none (cudnnKernel).
//
// With torch.backends.cudnn.benchmark, the first time a configuration is
// seen (the benchmark cache key: shapes, strides, padding, dtype, layout)
// the algorithm search runs first: Conv_v7.cpp's findAlgorithms
// allocates a Workspace of getMaxWorkspaceSize (the largest candidate
// workspace that is not above CUDACachingAllocator::cacheInfo's largest
// block, which is at least the device's free memory), runs cudnnFind*Ex
// and calls emptyCache() while the Workspace is still held, so the
// search workspace stays reserved afterwards (pytorch issue 50190);
// Conv_v8.cpp's get_plans_from_find allocates the largest plan workspace
// not above cacheInfo's figure (halving it on an out-of-memory error),
// times the plans, frees it, and run_single_conv then empties the cache
// (_cudnn_get_conv_benchmark_empty_cache). The search workspace is the
// largest of the candidates' (generate_and_filter_plans keeps every plan
// whose workspace is not above cacheInfo's figure and allocates the
// largest): at least the explicit-GEMM figure and the kernel's own, which
// is what is taken; the real search may take more, up to the free memory,
// which the first step's peak then lacks (the output says so).

// cudnnWorkspace is what one cuDNN kernel of a convolution allocates.
type cudnnWorkspace struct {
	// kernel is the kernel's own workspace under the setup's release,
	// search the largest workspace of the algorithm search of
	// torch.backends.cudnn.benchmark.
	kernel, search int64
	// nhwc: kernel is the tensor cores' NHWC copies (cuDNN 9), not the
	// explicit-GEMM bound.
	nhwc bool
	// cudnn is false where the convolution does not go to cuDNN at all.
	cudnn bool
}

// convWorkspace is the workspace of one cuDNN kernel of a forward
// convolution with input shape in, output shape out and compute dtype dt.
func convWorkspace(s *Setup, in, out graph.Shape, a graph.Attr, dt graph.DType) cudnnWorkspace {
	if len(in) != 4 || len(out) != 4 {
		return cudnnWorkspace{}
	}
	if g := a.Groups; g > 1 && g == in[1] && !a.ChannelsLast && dt != graph.F16 {
		// Convolution.cpp use_cudnn_depthwise: a depthwise convolution
		// goes to cuDNN in channels-last layout or in float16 only;
		// otherwise the native depthwise kernel (ConvBackend::
		// CudaDepthwise2d), which takes no workspace, runs it.
		return cudnnWorkspace{}
	}
	gemm := explicitGEMMWorkspace(in, out, a, dt)
	if s.Profile.CudnnConvWorkspace != "nhwc_transform" || !cudnnTensorCores(s, dt) {
		return cudnnWorkspace{kernel: gemm, search: gemm, cudnn: true}
	}
	if a.ChannelsLast || s.ChannelsLast {
		// The input, output and weight are NHWC already (PyTorch makes
		// the weight channels-last beside a channels-last input:
		// cudnn_conv_suggest_memory_format): nothing to transpose.
		return cudnnWorkspace{search: gemm, nhwc: true, cudnn: true}
	}
	n := (in[0]*in[1]*in[2]*in[3] + out[0]*out[1]*out[2]*out[3]) * dt.Size()
	if a.Kernel != [2]int64{1, 1} {
		groups := max(a.Groups, 1)
		n += out[1] * (in[1] / groups) * a.Kernel[0] * a.Kernel[1] * dt.Size()
	}
	return cudnnWorkspace{kernel: n, search: max(n, gemm), nhwc: true, cudnn: true}
}

// explicitGEMMWorkspace is the workspace of cuDNN's explicit-GEMM
// algorithm: the unfolded input, none for a 1×1, stride-1, unpadded
// kernel, whose unfolded input is the input itself.
func explicitGEMMWorkspace(in, out graph.Shape, a graph.Attr, dt graph.DType) int64 {
	if a.Kernel == [2]int64{1, 1} && a.Stride == [2]int64{1, 1} && a.Padding == [2]int64{} {
		return 0
	}
	return in[0] * in[1] * a.Kernel[0] * a.Kernel[1] * out[2] * out[3] * dt.Size()
}

// cudnnTensorCores says whether cuDNN runs a convolution of dtype dt on
// the tensor cores: float16 from Volta (compute capability 7), bfloat16
// and float32 as TF32 from Ampere (8), float32 only while
// torch.backends.cudnn.allow_tf32 is on (the release's default; the
// cuDNN v8 path filters the configs that note tensor cores out otherwise:
// Conv_v8.cpp filterEngineConfigs).
func cudnnTensorCores(s *Setup, dt graph.DType) bool {
	switch dt {
	case graph.F16:
		return s.ComputeMajor >= 7
	case graph.BF16:
		return s.ComputeMajor >= 8
	case graph.F32:
		return s.ComputeMajor >= 8 && s.Profile.CudnnAllowTF32
	}
	return false
}

// cudnnKernel notes one cuDNN convolution kernel (kind "fwd", "bwd_data"
// or "bwd_filter") of the forward convolution in → out: the benchmark
// search the first time its configuration is seen (for every kernel that
// goes to cuDNN, a 1×1 one too), then the kernel's own workspace, each
// allocated and freed around the call.
//
// Each workspace allocation falls back (trace.Event.Fallback) under the
// number of its benchmark-cache entry: near the limit the replay gives the
// kernel no workspace, as PyTorch's algorithm loop ends with one that
// needs none, and keeps that choice for the configuration.
func (sim *Simulator) cudnnKernel(kind string, in, out graph.Shape, a graph.Attr, dt graph.DType) {
	ws := convWorkspace(&sim.s, in, out, a, dt)
	if sim.s.CPU || !ws.cudnn {
		return
	}
	sim.sum.CudnnConvs = true
	n, search := ws.kernel, ws.search
	sim.sum.ConvWorkspaceNHWC = sim.sum.ConvWorkspaceNHWC || ws.nhwc
	if n > sim.sum.ConvWorkspaceBytes {
		sim.sum.ConvWorkspaceBytes = n
	}
	if sim.s.CudnnBenchmark && search > sim.sum.ConvWorkspaceBytes {
		sim.sum.ConvWorkspaceBytes = search
	}
	// The benchmark cache's key: ConvolutionParams (shapes, padding,
	// stride, dilation, groups, dtype, layout) with the kernel's kind
	// (forward, backward-data and backward-filter have caches of their
	// own). Its number names the cache in the trace.
	key := cudnnKey{kind: kind, kernel: a.Kernel, stride: a.Stride, padding: a.Padding,
		dilation: a.Dilation, groups: a.Groups, channelsLast: a.ChannelsLast, dt: dt}
	copy(key.in[:], in)
	copy(key.out[:], out)
	cache, seen := sim.cudnnKeys[key]
	if !seen {
		if sim.cudnnKeys == nil {
			sim.cudnnKeys = map[cudnnKey]int32{}
		}
		cache = int32(len(sim.cudnnKeys) + 1)
		sim.cudnnKeys[key] = cache
	}
	if sim.s.CudnnBenchmark {
		// the search runs the first time a configuration is seen
		if !seen {
			sim.sum.CudnnSearches++
			var ws *storage
			if search > 0 {
				// The search's workspace is sized to what the cache
				// can give (getMaxWorkspaceSize; get_available_workspace
				// in Conv_v8.cpp): it never fails the step, and its
				// size is not cached.
				ws = sim.allocFallback(search, trace.Workspace, -1)
			}
			switch sim.s.Profile.CudnnBenchmarkEmptyCache {
			case "during_search":
				sim.EmptyCache()
				sim.freeIf(ws)
			case "after_search":
				sim.freeIf(ws)
				sim.EmptyCache()
			default:
				sim.freeIf(ws)
			}
		}
	}
	if n > 0 {
		sim.free(sim.allocFallback(n, trace.Workspace, cache))
	}
}

// cudnnKey is a convolution kernel's entry in cuDNN's benchmark cache.
type cudnnKey struct {
	kind                              string
	in, out                           [4]int64
	kernel, stride, padding, dilation [2]int64
	groups                            int64
	channelsLast                      bool
	dt                                graph.DType
}

// convCUDAForward runs the forward kernel's workspace, after the output.
func convCUDAForward(c *fwdCtx) {
	if c.m.sim.s.CPU {
		return
	}
	c.m.sim.cudnnKernel("fwd", c.shape(0), c.outShape(), c.op.Attr, c.in[0].dt)
}

func (sim *Simulator) freeIf(st *storage) {
	if st != nil {
		sim.free(st)
	}
}

// convCUDABackward is cudnn_convolution_backward (ConvShared.cpp): the
// input gradient, then the backward-data kernel; the weight gradient,
// then the backward-filter kernel; the bias gradient is a sum of the
// output gradient afterwards (convolution_backward in Convolution.cpp).
func convCUDABackward(c *bwdCtx) {
	cudnnGrads(c, c.m.g.Tensors[c.op.Inputs[0]].Shape, c.m.g.Tensors[c.op.Output].Shape, "bwd_data")
}

// cudnnGrads makes a convolution's gradients with cuDNN's kernels for the
// convolution from in to out: the input's with the data kernel (a
// convolution's backward-data; a transposed convolution's is the mirrored
// convolution's forward), the weight's with backward-filter.
//
// A strided incoming gradient (gradlayout.go) is copied first
// (aten/src/ATen/native/cudnn/ConvShared.cpp). A convolution's
// cudnn_convolution_backward takes grad_output_t.to(input's suggested
// memory format): that returns the tensor itself where
// suggest_memory_format says the same of it (to_will_alias), and then
// each half copies it: cudnn_convolution_backward_input makes
// grad_output->contiguous(memory_format) after it allocated grad_input,
// cudnn_convolution_backward_weight makes grad_output_t.contiguous(layout)
// before grad_weight; each copy is freed when its half returns. A
// gradient with channels-last strides (a patch embedding's, that came back
// through flatten(2).transpose(1, 2)) is copied by the .to() itself, once,
// alive through both halves. A transposed convolution's
// cudnn_convolution_transpose_backward makes grad_output_t.contiguous(...)
// once, for both halves. A channels-last convolution's gradient layout is
// not followed: no copy is charged.
//
// The bias gradient, grad_output summed over (0, 2, 3) after the
// kernels (convolution_backward in Convolution.cpp), reads the incoming
// gradient as it is: with channels-last strides that is a dense
// [N·H·W, C] row-major tensor summed over its rows, whose staging
// buffer biasGradReduce charges as for a linear layer's bias (measured
// under ViT-B/16's patch embedding on an H200: 73.5 MiB and 24 bytes of
// semaphores at batch 64 under bf16 autocast).
func cudnnGrads(c *bwdCtx, in, out graph.Shape, data string) {
	m := c.m
	dt := c.inDT(0)
	gshape := m.g.Tensors[c.op.Output].Shape
	strided := c.stridedGrad() && !c.op.Attr.ChannelsLast
	nhwc := strided && channelsLastStrides(gshape, c.gst)
	transposed := data != "bwd_data"
	var once *storage
	if strided && (transposed || nhwc) {
		once = c.gradCopy()
		strided = false
	}
	if c.needs(0) {
		c.gradIn(0)
		var gcopy *storage
		if strided {
			gcopy = c.gradCopy()
		}
		m.sim.cudnnKernel(data, in, out, c.op.Attr, dt)
		m.sim.unref(gcopy)
	}
	if w := c.op.Weight; w != graph.None && m.g.Tensors[w].RequiresGrad && m.pidx[w] >= 0 {
		var gcopy *storage
		if strided {
			gcopy = c.gradCopy()
		}
		c.gradParam(w)
		m.sim.cudnnKernel("bwd_filter", in, out, c.op.Attr, dt)
		m.sim.unref(gcopy)
	}
	m.sim.unref(once)
	n := len(c.out)
	c.gradParam(c.op.Bias)
	if nhwc && len(c.out) > n && len(gshape) == 4 && !transposed {
		c.biasGradReduce(gshape.Numel()/gshape[1], gshape[1], c.gdt)
	}
}
