package cost

import (
	"fmt"
	"math"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// LaunchFloor is the least time one kernel of an eager op costs, seconds.
const LaunchFloor = 5e-6

// Part names where in the step time goes.
type Part uint8

const (
	Forward Part = iota
	Backward
	Recompute // the forward of checkpointed regions, again, inside backward
	Optimizer // the optimizer step, gradient unscaling, zeroing
	numParts
)

func (p Part) String() string {
	return [...]string{"forward", "backward", "recompute", "optimizer"}[p]
}

// Parts lists the parts in order.
func Parts() []Part { return []Part{Forward, Backward, Recompute, Optimizer} }

// Estimate is the predicted time of one optimizer step.
type Estimate struct {
	// Seconds is the whole step as the calibrated model times it: every
	// micro-batch's forward and backward, and the optimizer, each kernel
	// at its shape's achievable rate and issued by the host (stream.go,
	// kernel.go).
	Seconds float64
	// By splits Seconds.
	By [numParts]float64
	// Bound is the roofline: every kernel at the datasheet's peaks, with
	// the launch floor, and no host. No step runs faster.
	Bound Bound
	// Kernels is the number of kernels launched; Ops the forward's ops
	// called from Python (what the profiler shows as top-level aten ops;
	// autocast's casts run inside them), Nodes the nodes autograd's engine
	// runs in backward (AccumulateGrad's included), each for one
	// micro-batch.
	Kernels    int64
	Ops, Nodes int64
	// ModelFLOPs counts the forward and backward arithmetic of every
	// micro-batch, without recomputation: the work the model needs.
	// FLOPs adds what recomputation and the optimizer do.
	ModelFLOPs, FLOPs float64
	// Bytes is the memory traffic.
	Bytes float64
	// IdealSeconds is how long ModelFLOPs take at the peak rate of each
	// kernel's type; MFU (model FLOPs utilisation) is IdealSeconds over
	// Seconds.
	IdealSeconds, MFU float64
	// Loop is the training loop's own work per step, part of Seconds:
	// train.Setup.LoopOverhead for each micro-batch, which the GPU waits
	// for (the bound leaves it out).
	Loop float64
	// Samples is the samples of one optimizer step (micro-batch ×
	// accumulation); Tokens is Samples × sequence length, 0 for models
	// without a sequence.
	Samples, Tokens int64
}

// Bound is the roofline bound of a step.
type Bound struct {
	Seconds float64
	By      [numParts]float64
	// MFU is IdealSeconds over the bound's Seconds.
	MFU float64
}

// BoundSamplesPerSecond is the throughput the bound allows.
func (e Estimate) BoundSamplesPerSecond() float64 {
	if e.Bound.Seconds <= 0 {
		return 0
	}
	return float64(e.Samples) / e.Bound.Seconds
}

// BoundTokensPerSecond is the throughput in tokens the bound allows.
func (e Estimate) BoundTokensPerSecond() float64 {
	if e.Bound.Seconds <= 0 {
		return 0
	}
	return float64(e.Tokens) / e.Bound.Seconds
}

// SamplesPerSecond is the training throughput in samples.
func (e Estimate) SamplesPerSecond() float64 {
	if e.Seconds <= 0 {
		return 0
	}
	return float64(e.Samples) / e.Seconds
}

// TokensPerSecond is the throughput in tokens (0 without a sequence).
func (e Estimate) TokensPerSecond() float64 {
	if e.Seconds <= 0 {
		return 0
	}
	return float64(e.Tokens) / e.Seconds
}

// Input is one step to time.
type Input struct {
	Graph *graph.Graph
	// Ops is the simulation's record of the graph's first forward pass
	// (train.Summary.Ops): the dtypes and autocast copies of each op.
	Ops []train.OpRun
	// Setup must be normalized (the simulation's).
	Setup train.Setup
	Rates gpu.Rates
	// Seq is the sequence length, 0 for models without one.
	Seq int64
	// Batch is the micro-batch size.
	Batch int64
	// Host is the host's cost per op; nil is DefaultHost.
	Host *Host
}

// Step predicts the time of one optimizer step.
func Step(in Input) (Estimate, error) {
	p, err := TimePass(in)
	if err != nil {
		return Estimate{}, err
	}
	return p.Step(in)
}

// Pass is one micro-batch's forward, recomputation and backward, timed:
// what accumulation repeats, and what neither the accumulation nor the
// optimizer changes. A planner times a pass once and finishes it into a
// step for each optimizer and accumulation it tries.
type Pass struct {
	micro timer
}

// TimePass times in's micro-batch. It reads in's graph, records, rates,
// host, and of the setup the checkpointing, the TF32 switches and the
// memory format.
func TimePass(in Input) (*Pass, error) {
	if in.Graph == nil {
		return nil, fmt.Errorf("no graph to time")
	}
	// requires-grad as the checkpointing policy leaves it: a region
	// reentrant checkpointing cuts off has no backward and no recompute
	g := train.AutogradGraph(in.Graph, in.Setup.Checkpoint)
	if len(in.Ops) != len(g.Ops) {
		return nil, fmt.Errorf("graph %s: %d ops but %d recorded runs", g.Name, len(g.Ops), len(in.Ops))
	}
	if !in.Rates.Known() {
		return nil, fmt.Errorf("no peak rates known for this GPU: step time needs its FP32 rate and memory bandwidth")
	}
	tf32 := [...]bool{gemm: in.Setup.Profile.MatmulAllowTF32, conv: in.Setup.Profile.CudnnAllowTF32}
	host := HostFor(in.Setup.Profile)
	if in.Host != nil {
		host = *in.Host
	}
	region, nregions := train.Regions(g, in.Setup.Checkpoint)
	// One micro-batch, then scaled: every micro-batch runs the same
	// kernels. The forward runs the ops in order; backward runs them in
	// reverse, and a checkpointed region's forward runs again when
	// backward reaches the region's last op.
	micro := timer{r: in.Rates, m: newMachine(in.Rates), host: host, tf32: tf32, nhwc: in.Setup.ChannelsLast}
	micro.setPart(Forward)
	micro.model = true
	for i := range g.Ops {
		micro.beginForward(&g.Ops[i])
		forward(&micro, g, &g.Ops[i], in.Ops[i])
		micro.endOp()
	}
	var members [][]int32
	dead := train.DeadRegions(g, region, nregions)
	if nregions > 0 {
		members = make([][]int32, nregions)
		for i, r := range region {
			if r >= 0 {
				members[r] = append(members[r], int32(i))
			}
		}
	}
	for i := len(g.Ops) - 1; i >= 0; i-- {
		op := &g.Ops[i]
		if r := region[i]; r >= 0 && members[r] != nil && !dead[r] {
			micro.setPart(Recompute)
			micro.model = false
			for _, j := range members[r] {
				micro.beginForward(&g.Ops[j])
				forward(&micro, g, &g.Ops[j], in.Ops[j])
				micro.endOp()
			}
			members[r] = nil
		}
		if g.Tensors[op.Output].RequiresGrad {
			micro.setPart(Backward)
			micro.model = true
			micro.beginNode()
			backward(&micro, g, op, in.Ops[i])
			micro.endOp()
		}
	}
	micro.accumulateGrad(g)
	return &Pass{micro: micro}, nil
}

// Step finishes a timed pass into an optimizer step: in's accumulation
// repeats the pass, and in's optimizer steps the graph's parameters. in
// must be the pass's graph, records and rates.
func (p *Pass) Step(in Input) (Estimate, error) {
	if in.Graph == nil {
		return Estimate{}, fmt.Errorf("no graph to time")
	}
	g := train.AutogradGraph(in.Graph, in.Setup.Checkpoint)
	if p == nil {
		return Estimate{}, fmt.Errorf("no timed pass to finish")
	}
	micro := p.micro
	t := timer{r: micro.r, m: micro.m, host: micro.host, tf32: micro.tf32, nhwc: micro.nhwc}
	acc := int64(max(1, in.Setup.Accumulate))
	t.add(&micro, float64(acc))
	t.setPart(Optimizer)
	t.model = false
	// The calibrated time: the first micro-batch from an idle device;
	// every later one adds exactly the larger of its host and device
	// totals (from where the first leaves the queue, the host issues the
	// second while the device finishes the first, so the second ends
	// max(device, host) later, and so on), shared among the parts by
	// whichever side binds. The optimizer then continues the queue.
	by := micro.by
	if acc > 1 {
		var dev, host float64
		for p := range micro.dev {
			dev += micro.dev[p]
			host += micro.cpu[p]
		}
		n := float64(acc - 1)
		inc := max(dev, host)
		for p := range by {
			if dev >= host && dev > 0 {
				by[p] += n * inc * micro.dev[p] / dev
			} else if host > 0 {
				by[p] += n * inc * micro.cpu[p] / host
			}
		}
		t.q = queue{cpu: float64(acc) * host, gpu: micro.q.gpu + n*inc}
	} else {
		t.q = micro.q
	}
	optimizer(&t, g, in.Setup, acc)
	e := t.est
	e.By = by
	t.flushTo(&e.By)
	var ok bool
	if e.Samples, ok = graph.MulSize(in.Batch, acc); !ok {
		return Estimate{}, fmt.Errorf("batch %d × accumulation %d samples a step overflows", in.Batch, acc)
	}
	if in.Seq > 0 {
		if e.Tokens, ok = graph.MulSize(e.Samples, in.Seq); !ok {
			return Estimate{}, fmt.Errorf("%d samples × sequence %d tokens a step overflows", e.Samples, in.Seq)
		}
	}
	for _, s := range e.Bound.By {
		e.Bound.Seconds += s
	}
	for _, s := range e.By {
		e.Seconds += s
	}
	e.Loop = float64(acc) * in.Setup.LoopOverhead.Seconds()
	e.Seconds += e.Loop
	if e.Seconds > 0 {
		e.MFU = e.IdealSeconds / e.Seconds
	}
	if e.Bound.Seconds > 0 {
		e.Bound.MFU = e.IdealSeconds / e.Bound.Seconds
	}
	return e, nil
}

// rate says which peak a kernel's arithmetic runs at.
type rate uint8

const (
	vector rate = iota // CUDA cores, float32: elementwise, reductions
	gemm               // cuBLAS matmul: half types on the tensor cores, float32 as the profile's matmul allow_tf32 says
	conv               // cuDNN convolution: half types on the tensor cores, float32 as the profile's cudnn allow_tf32 says
)

type timer struct {
	r gpu.Rates
	m machine
	// host is the host's cost per op; op is the part's (forward-side
	// parts call from Python, backward runs in autograd's engine)
	host Host
	op   float64
	// fresh: the op being timed has issued no kernel yet and owes
	// pending, its dispatch (Host.PerOp); bulk: the kernels' host time
	// was charged as a whole (the optimizer step's, Host.Optim)
	fresh   bool
	pending float64
	bulk    bool
	// modules are the nn.Module calls entered so far (Host.Module)
	modules map[string]bool
	// tf32 says which kinds run float32 in TF32 (the runtime profile's
	// allow_tf32 defaults)
	tf32 [3]bool
	// nhwc: the model runs in channels-last memory format (no transposes
	// around tensor-core convolutions, see transposes)
	nhwc  bool
	part  Part
	model bool // arithmetic that counts toward ModelFLOPs
	est   Estimate
	// q is the calibrated model's queue; by splits its time among the
	// parts, dev and cpu total each part's device and host time
	q            queue
	by, dev, cpu [numParts]float64
}

// flushTo adds the calibrated time the timer's kernels took to by.
func (t *timer) flushTo(by *[numParts]float64) {
	for p := range by {
		by[p] += t.by[p]
	}
}

func (t *timer) setPart(p Part) {
	t.part = p
	t.op = t.host.Forward
	if p == Backward {
		t.op = t.host.Backward
	}
}

func (t *timer) peak(k rate, dt graph.DType) float64 {
	r := t.r
	var p float64
	switch {
	case k == vector:
	case dt == graph.F16:
		p = r.FP16
	case dt == graph.BF16:
		p = r.BF16
	case dt == graph.F32 && t.tf32[k]:
		p = r.TF32
	}
	if p <= 0 {
		p = r.FP32
	}
	return p
}

// kernel adds one kernel.
func (t *timer) kernel(k rate, dt graph.DType, flops, bytes float64) {
	t.kernels(1, k, dt, flops, bytes)
}

// kernels adds n kernels, each its own eager op, that share the
// arithmetic and traffic evenly.
func (t *timer) kernels(n int64, k rate, dt graph.DType, flops, bytes float64) {
	if n <= 0 {
		return
	}
	t.kernelsAt(t.hostCost(n), n, k, dt, flops, bytes)
}

// kernelsAt adds n kernels the host issues in cpu seconds.
func (t *timer) kernelsAt(cpu float64, n int64, k rate, dt graph.DType, flops, bytes float64) {
	if n <= 0 {
		return
	}
	p := t.bound(n, k, dt, flops, bytes)
	dev := bytes / t.m.bw
	switch k {
	case vector:
		dev = max(dev, flops/p)
	case gemm:
		dev = max(dev, flops/(p*t.m.gemm))
	default:
		dev = max(dev, flops/(p*t.m.mm))
	}
	t.issue(cpu, n, dev)
}

// launches adds one eager op that launches n kernels (a foreach op's
// multi-tensor launches).
func (t *timer) launches(n int64, k rate, dt graph.DType, flops, bytes float64) {
	if n <= 0 {
		return
	}
	p := t.bound(n, k, dt, flops, bytes)
	cpu := t.op + float64(n-1)*t.host.Launch
	if t.host.PerOp {
		cpu = t.hostCost(n)
	}
	t.issue(cpu, n, max(bytes/t.m.bw, flops/p))
}

// product adds one matrix product kernel: batch products of [rows, inner]
// by [inner, cols], on the tile model of kernel.go.
func (t *timer) product(k rate, dt graph.DType, rows, inner, cols, batch, bytes float64) {
	flops := 2 * batch * rows * inner * cols
	p := t.bound(1, k, dt, flops, bytes)
	share := t.m.mm
	if k == gemm {
		share = t.m.gemm
	}
	secs, extra := t.m.gemmTime(p, share, rows, inner, cols, batch, p != t.r.FP32)
	t.issue(t.hostCost(1), 1, max(secs, (bytes+extra)/t.m.bw))
}

// productSeconds is the device time product gives a kernel, without
// issuing it.
func (t *timer) productSeconds(k rate, dt graph.DType, rows, inner, cols, batch, bytes float64) float64 {
	p := t.peak(k, dt)
	share := t.m.mm
	if k == gemm {
		share = t.m.gemm
	}
	secs, extra := t.m.gemmTime(p, share, rows, inner, cols, batch, p != t.r.FP32)
	return max(secs, (bytes+extra)/t.m.bw, KernelGPU)
}

// transposeSeconds is the device time transposes gives n kernels over
// bytes, without issuing them, and whether there are any.
func (t *timer) transposeSeconds(dt graph.DType, cl bool, n int64, bytes float64) (float64, bool) {
	if t.nhwc || cl || t.peak(conv, dt) == t.r.FP32 {
		return 0, false
	}
	dev := 2 * bytes / t.m.bw
	if t.m.tr > 0 {
		dev = max(dev, bytes/size(dt)/t.m.tr)
	}
	return max(dev, float64(n)*KernelGPU), true
}

// pointwise times one pass of a 1×1, stride-1, unpadded convolution of an
// NCHW tensor (forward, data or weight gradient), which cuDNN runs either
// as its layout transposes around an implicit GEMM, or as a product per
// image over the [C, H·W] planes, which needs no layout change (the NCHW
// profiles of testdata/throughput/kernels-h200 show both: nvjet GEMM
// kernels alone for ResNet-50's 1×1 convolutions at 56×56 and 28×28,
// transposes and an xmma kernel at 14×14 and 7×7, where H·W fills the
// tiles badly). PyTorch leaves the choice to cuDNN: with cudnn.benchmark
// it times the engines and keeps the fastest (cudnnFind, benchmark_cache
// in aten/src/ATen/native/cudnn/Conv_v8.cpp), so the faster of the two is
// charged. implicit is the implicit GEMM's [rows, inner, cols], perImage
// the product per image with its batch, tr the transposed operands'
// bytes, bytes every operand's. It reports false where there are no
// transposes to avoid (channels-last, float32 off the tensor cores).
func (t *timer) pointwise(dt graph.DType, cl bool, implicit [3]float64, perImage [4]float64, tr, bytes float64) bool {
	ts, ok := t.transposeSeconds(dt, cl, 2, tr)
	if !ok {
		return false
	}
	viaT := ts + t.productSeconds(conv, dt, implicit[0], implicit[1], implicit[2], 1, bytes)
	viaG := t.productSeconds(gemm, dt, perImage[0], perImage[1], perImage[2], perImage[3], bytes)
	if viaG <= viaT {
		t.product(gemm, dt, perImage[0], perImage[1], perImage[2], perImage[3], bytes)
		return true
	}
	t.transposes(dt, cl, 2, tr)
	t.product(conv, dt, implicit[0], implicit[1], implicit[2], 1, bytes)
	return true
}

// transposes adds the layout conversions cuDNN runs around a tensor-core
// convolution of NCHW tensors: its tensor-core kernels work in NHWC, so an
// NCHW operand is transposed to NHWC before and the result back after,
// each a kernel that reads and writes its tensor (NVIDIA, Deep Learning
// Performance Documentation, Convolutional Layers User's Guide, "Tensor
// Layouts in Memory: NCHW vs NHWC"; seen as nchwToNhwc and nhwcToNchw
// kernels in NCHW mixed-precision profiles, and as cuDNN's
// genericTranspose_kernel around a grouped float16 convolution in pytorch
// issue 54324). bytes are the operands' sizes; n the kernels. Each element
// costs its index arithmetic, so the kernels move elements at a rate per
// SM per clock (gpu.Achievable.Transpose, machine.tr), whatever their
// width, and never faster than the achievable bandwidth moves their reads
// and writes (kernel.go). The roofline bound keeps the bandwidth alone. A
// channels-last model (nhwc), a channels-last input (cl), or a
// convolution off the tensor cores (float32 without TF32) runs none.
func (t *timer) transposes(dt graph.DType, cl bool, n int64, bytes float64) {
	if t.nhwc || cl || t.peak(conv, dt) == t.r.FP32 {
		return
	}
	t.bound(n, vector, dt, 0, 2*bytes)
	dev := 2 * bytes / t.m.bw
	if t.m.tr > 0 {
		dev = max(dev, bytes/size(dt)/t.m.tr)
	}
	t.issue(t.hostCost(n), n, dev)
}

// spatialBatchNorm adds one of cuDNN's CUDNN_BATCHNORM_SPATIAL training
// kernels over x (kernel.go): passes reads and writes of the tensor, each
// channel's elements moved by one block, the blocks at most the SMs' rate
// and the achievable bandwidth. It reports false where PyTorch does not
// run them: channels-last input (the persistent kernels), an input of
// fewer than three dimensions (per-activation mode), float64 or an input
// of 2³¹ elements or more (_batch_norm_impl_index's use_cudnn takes the
// native kernels then), or a GPU without an SM count.
func (t *timer) spatialBatchNorm(g *graph.Graph, op *graph.Op, dt graph.DType, passes float64) bool {
	x := g.Tensors[op.Inputs[0]].Shape
	n := float64(x.Numel())
	if t.nhwc || op.Attr.ChannelsLast || len(x) < 3 || dt == graph.F64 || n >= 1<<31 || t.m.bnb <= 0 {
		return false
	}
	t.bound(1, vector, dt, 0, passes*n*size(dt))
	t.issue(t.hostCost(1), 1, t.m.spatialBN(float64(x[1]), passes*n, size(dt)))
	return true
}

// layerNorm adds a layer norm's forward kernel: its bytes at the
// achievable bandwidth and its rows at the per-row cost of one block's
// reduction (kernel.go).
func (t *timer) layerNorm(g *graph.Graph, op *graph.Op, dt graph.DType, bytes float64) {
	t.bound(1, vector, dt, 0, bytes)
	t.issue(t.hostCost(1), 1, bytes/t.m.bw+layerNormRows(g, op)*t.m.lnr)
}

// layerNormRows is the rows a layer norm normalizes: the input's elements
// over those of its last Attr.Dim dimensions.
func layerNormRows(g *graph.Graph, op *graph.Op) float64 {
	x := g.Tensors[op.Inputs[0]].Shape
	d := op.Attr.Dim
	if d < 1 || d > len(x) {
		d = 1
	}
	n := 1.0
	for _, v := range x[len(x)-d:] {
		n *= float64(v)
	}
	return float64(x.Numel()) / max(n, 1)
}

// LayerNormSeconds is the device time batchfit gives a layer norm's
// forward kernel on a GPU: rows of n elements of width bytes in and out
// (float32 under autocast). It is what validation holds to the kernels of
// real profiles.
func LayerNormSeconds(r gpu.Rates, rows, n, width float64) float64 {
	m := newMachine(r)
	return max(2*rows*n*width/m.bw+rows*m.lnr, KernelGPU)
}

// spatialBN is the device time of a spatial batch-norm kernel moving
// elements of width bytes over c channels (kernel.go), at most the
// achievable bandwidth.
func (m machine) spatialBN(c, elements, width float64) float64 {
	return max(elements/min(c*m.bnb, m.bns), elements*width/m.bw)
}

// SpatialBatchNormSeconds is the device time batchfit gives one of cuDNN's
// spatial batch-norm training kernels on a GPU: passes over elements of
// elemSize bytes in c channels (3 forward, 5 backward). It is what
// validation holds to the kernels of real profiles.
func SpatialBatchNormSeconds(r gpu.Rates, c, elements, elemSize, passes float64) float64 {
	m := newMachine(r)
	if m.bnb <= 0 {
		return 0
	}
	return max(m.spatialBN(c, passes*elements, elemSize), KernelGPU)
}

// grouped adds a grouped or depthwise convolution's kernel: timed by its
// traffic at the depthwise kernels' rate per SM per clock of its layout,
// at most the achievable bandwidth, channels-last ones their multiply-adds
// too, and at the CUDA cores' rate at best (kernel.go, gpu/catalog.go).
func (t *timer) grouped(k rate, dt graph.DType, cl bool, flops, bytes float64) {
	t.bound(1, k, dt, flops, bytes)
	t.issue(t.hostCost(1), 1, max(t.m.depthwise(t.nhwc || cl, flops, bytes), flops/t.r.FP32))
}

// depthwise is a grouped or depthwise convolution kernel's device time by
// its layout's rates (kernel.go): its bytes, and on a channels-last tensor
// its multiply-adds too.
func (m machine) depthwise(cl bool, flops, bytes float64) float64 {
	if !cl {
		return bytes / m.dw
	}
	dev := bytes / m.dwcl
	if m.dwmc > 0 {
		dev += flops / 2 / m.dwmc
	}
	return dev
}

// DepthwiseSeconds is the device time batchfit gives a depthwise
// convolution's pass on a GPU (its flops, twice its multiply-adds, and
// its bytes), NCHW or channels-last, before the CUDA cores' floor. It is
// what validation holds to the kernels of real profiles.
func DepthwiseSeconds(r gpu.Rates, channelsLast bool, flops, bytes float64) float64 {
	return newMachine(r).depthwise(channelsLast, flops, bytes)
}

// bound charges n kernels to the roofline and the counts, and returns the
// peak they run at.
func (t *timer) bound(n int64, k rate, dt graph.DType, flops, bytes float64) float64 {
	p := t.peak(k, dt)
	floor := LaunchFloor
	if t.r.Floor > 0 {
		floor = t.r.Floor
	}
	s := math.Max(math.Max(flops/p, bytes/t.r.Bandwidth), float64(n)*floor)
	t.est.Bound.By[t.part] += s
	t.est.Kernels += n
	t.est.FLOPs += flops
	t.est.Bytes += bytes
	if t.model {
		t.est.ModelFLOPs += flops
		t.est.IdealSeconds += flops / p
	}
	return p
}

// issue queues n kernels the host issues in cpu seconds and the device
// runs in dev seconds, each at least KernelGPU.
func (t *timer) issue(cpu float64, n int64, dev float64) {
	g := max(dev, float64(n)*KernelGPU)
	t.by[t.part] += t.q.issue(cpu, g)
	t.dev[t.part] += g
	t.cpu[t.part] += cpu
}

// add adds another timer's figures, times f.
func (t *timer) add(o *timer, f float64) {
	for i := range t.est.Bound.By {
		t.est.Bound.By[i] += f * o.est.Bound.By[i]
	}
	t.est.Kernels += int64(f) * o.est.Kernels
	t.est.Ops, t.est.Nodes = o.est.Ops, o.est.Nodes
	t.est.FLOPs += f * o.est.FLOPs
	t.est.ModelFLOPs += f * o.est.ModelFLOPs
	t.est.IdealSeconds += f * o.est.IdealSeconds
	t.est.Bytes += f * o.est.Bytes
}

// Align carries the op records of a simulation on one graph over to
// another graph of the same model at another size. A builder may emit a
// slightly different op list at another batch size (a reshape that is a
// view at batch 1 and a copy beyond it), so ops are matched by name and
// kind in order; an op with no counterpart computes in its first
// operand's dtype, which is what the views and copies that come and go
// with the shapes do (autocast does not touch them).
func Align(g, from *graph.Graph, runs []train.OpRun) []train.OpRun {
	if g == from || (len(g.Ops) == len(runs) && sameOps(g, from)) {
		return runs
	}
	type key struct {
		name string
		kind graph.Kind
	}
	queue := map[key][]train.OpRun{}
	for i := range from.Ops {
		k := key{from.Ops[i].Name, from.Ops[i].Kind}
		queue[k] = append(queue[k], runs[i])
	}
	dt := make([]graph.DType, len(g.Tensors))
	for i := range g.Tensors {
		dt[i] = g.Tensors[i].DType
	}
	out := make([]train.OpRun, len(g.Ops))
	for i := range g.Ops {
		op := &g.Ops[i]
		k := key{op.Name, op.Kind}
		if q := queue[k]; len(q) > 0 {
			out[i] = q[0]
			queue[k] = q[1:]
		} else {
			in := graph.F32
			if len(op.Inputs) > 0 {
				in = dt[op.Inputs[0]]
			}
			out[i] = train.OpRun{In: in, Out: in}
		}
		dt[op.Output] = out[i].Out
	}
	return out
}

func sameOps(a, b *graph.Graph) bool {
	if len(a.Ops) != len(b.Ops) {
		return false
	}
	for i := range a.Ops {
		if a.Ops[i].Kind != b.Ops[i].Kind {
			return false
		}
	}
	return true
}
