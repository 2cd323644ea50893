package cost

import (
	"fmt"
	"math"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/train"
)

// Communication under data, tensor and pipeline parallelism.
//
// Volumes are the simulation's (train.Collectives: the units, shards,
// dtypes and buckets whose memory it holds). A collective of S bytes over
// n ranks takes NCCL's ring cost: an all-reduce moves 2(n−1)/n·S through
// each GPU's link, an all-gather or a reduce-scatter (n−1)/n·S (the bus
// bandwidth convention of nccl-tests, doc/PERFORMANCE.md), at the link's
// one-direction rate times the share the ring reaches (gpu.NVLinkShare
// and the others), plus a fixed latency: NCCL's tuning model for the
// ring's Simple protocol, 8.4 µs, and 3.4 µs (NVLink), 5.7 µs (PCIe) or
// 14 µs (network) per step, 2(n−1) steps for an all-reduce and n−1 for
// the others (baseLat and hwLat in src/graph/tuning.cc of NVIDIA/nccl).
// Within one node of NVSwitch GPUs of compute capability 9.0 or later,
// NCCL also runs NVLink SHARP (NVLS) where its model says it is faster:
// the collective takes the lesser of the two (nvls.go).
//
// What overlaps follows each library's schedule, on two streams — the
// compute and one communication queue, on which NCCL's kernels of a
// process group run one after another:
//   - DDP: the reducer all-reduces each bucket as its last gradient is
//     ready, in the order the buckets fill (reverse registration order),
//     while backward goes on; only what is left after the last gradient —
//     at least the last bucket, which holds the first layers' gradients —
//     is exposed. Every micro-batch syncs (a loop without no_sync()).
//   - FSDP's NO_SHARD: as DDP, each unit's flat gradient a bucket.
//   - FSDP and FSDP2: each unit's parameters are all-gathered before its
//     forward (the next one issued while the current one computes, at
//     most two in flight: limit_all_gathers) and, resharded after
//     forward, again before its backward (BACKWARD_PRE prefetches the
//     next one); its gradients are reduce-scattered after its backward.
//     The root's gradients (embeddings, final norm, head) are complete
//     only at the end of backward, so their reduce-scatter is exposed.
//   - ZeRO-3: as FSDP, prefetching in both passes, the gradients
//     reduce-scattered in buckets of reduce_bucket_size on a side stream
//     (overlap_comm, True by default at stage 3).
//   - ZeRO 1 and 2: overlap_comm is False by default, so the gradients'
//     reduce-scatter runs on the compute stream (stage 2 every
//     micro-batch, stage 1 at the accumulation boundary), and the updated
//     parameters are all-gathered after the optimizer step: all exposed.
//   - Tensor parallelism: Megatron's collectives sit between the ops that
//     need their results: all on the critical path.
//   - Pipeline parallelism: 1F1B idles each stage for p−1 micro-batches'
//     forward and backward, the bubble (p−1)/(m+p−1) of the step, and
//     every micro-batch sends its activations forward and receives their
//     gradient back, blocking (send_forward_recv_backward).
//
// A unit's compute time is the step's forward or backward time shared by
// its parameters: a transformer's arithmetic is its matmuls, 2 FLOPs per
// parameter and token, so this follows the work except for attention's
// scores and the embedding lookup (which does none): the root unit's share
// is overstated.

// NCCL's ring, Simple protocol (src/graph/tuning.cc).
const (
	ringBaseLatency   = 8.4e-6
	ringNVLinkLatency = 3.4e-6
	ringPCIeLatency   = 5.7e-6
	ringNetLatency    = 14e-6
	// netFallback is the network rate per GPU taken when the catalog knows
	// no usual system for the GPU: one 100 Gb/s adapter.
	netFallback = 12.5e9
)

// Comm is the communication of one optimizer step on one rank.
type Comm struct {
	// Seconds is every collective's time, end to end; Exposed the part
	// the step waits for (not hidden under compute); Bubble the pipeline's
	// idle time. The step takes the compute, Exposed and Bubble.
	Seconds, Exposed, Bubble float64
	// Data, Tensor, Pipeline and Host split Seconds; DataExposed is
	// Data's exposed part (tensor parallelism's and the pipeline's sends
	// and offload's copies are exposed whole).
	Data, DataExposed, Tensor, Pipeline, Host float64
	// LastBucket is the time of the collective that can start only when
	// backward ends (DDP's last bucket, the root's reduce-scatter): the
	// least Data exposes.
	LastBucket float64
	// Bytes is the payload S of every collective, summed, and
	// Collectives their number.
	Bytes       float64
	Collectives int64
	// DataLink, ModelLink and PipeLink say which link the data-parallel
	// and tensor-parallel collectives and the pipeline's sends run over.
	DataLink, ModelLink, PipeLink string
	// OptimizerShare is the share of the optimizer step's time one rank
	// runs: 1/N where the optimizer state is sharded over N ranks (ZeRO,
	// FSDP: each rank steps its shard), 1 otherwise, and under offload,
	// whose step runs on the host and is not timed (the device's step
	// stands in for it).
	OptimizerShare float64
	// Notes say where the model is uncertain.
	Notes []string
}

// CommInput is what Communication needs.
type CommInput struct {
	Comms train.Comms
	// Setup must be normalized.
	Setup train.Setup
	Link  gpu.Link
	// TP and PP are the tensor-parallel degree and the pipeline's
	// stages (0 or 1: none).
	TP, PP int64
	// Compute is the step's compute (Step's estimate).
	Compute Estimate
}

// link is a bus: one-direction rate times the ring's share, and the
// per-step latency; nvls is set where NCCL can run NVLink SHARP over it.
type link struct {
	bw, hop float64
	name    string
	nvls    *gpu.Link
}

// ring is the collective's time: the ring's, or NVLS's where NCCL runs
// it and its model says it is faster (topoGetAlgoInfo in src/enqueue.cc
// of NVIDIA/nccl takes the algorithm of least ncclTopoGetAlgoTime).
func (l link) ring(k train.CollKind, bytes float64, n int) float64 {
	t := l.ringOnly(k, bytes, n)
	if l.nvls != nil {
		if v := NVLSSeconds(*l.nvls, k, bytes, n); v > 0 && v < t {
			return v
		}
	}
	return t
}

func (l link) ringOnly(k train.CollKind, bytes float64, n int) float64 {
	if n <= 1 || bytes <= 0 {
		return 0
	}
	f := float64(n-1) / float64(n)
	steps := float64(n - 1)
	if k == train.AllReduce {
		f, steps = 2*f, 2*steps
	}
	return ringBaseLatency + steps*l.hop + f*bytes/l.bw
}

// RingSeconds is the time of one collective of bytes over n ranks on a
// link of the given bus bandwidth (bytes/s, the share already applied) and
// per-step latency.
func RingSeconds(k train.CollKind, bytes float64, n int, busBW, hop float64) float64 {
	return link{bw: busBW, hop: hop}.ring(k, bytes, n)
}

// links picks the links of the data-parallel, tensor-parallel and
// pipeline collectives. Megatron places the tensor-parallel ranks
// innermost, then the pipeline's, then the data-parallel ones
// (initialize_model_parallel's default order "tp-cp-ep-dp-pp" keeps
// tensor parallelism within a node): a group runs over NVLink or PCIe
// while the ranks it spans fit in one node — TP for tensor parallelism,
// TP × PP for the pipeline, every GPU of the job for data parallelism —
// and over the network beyond.
func links(in CommInput) (dp, tp, pp, shard link, notes []string) {
	l := in.Link
	intra := link{bw: l.Intra * gpu.PCIeShare, hop: ringPCIeLatency, name: fmt.Sprintf("PCIe %.0f GB/s × %.1f", l.Intra/1e9, gpu.PCIeShare)}
	if l.NVLink {
		intra = link{bw: l.Intra * gpu.NVLinkShare, hop: ringNVLinkLatency, name: fmt.Sprintf("NVLink %.0f GB/s × %.1f", l.Intra/1e9, gpu.NVLinkShare)}
		// NVLS within a node only: across nodes NCCL needs CollNet
		// (NVLS) or runs NVLS_TREE, which are not modelled
		if nvlsOn(l) {
			intra.nvls = &l
		}
	}
	inter := l.Inter
	net := func() link {
		if inter <= 0 {
			inter = netFallback
			notes = append(notes, "the network between nodes is not known for this GPU: 100 Gb/s per GPU assumed")
		}
		return link{bw: math.Min(inter*gpu.NetShare, intra.bw), hop: ringNetLatency, name: fmt.Sprintf("network %.1f GB/s × %.1f", inter/1e9, gpu.NetShare)}
	}
	p := in.Setup.Parallel
	node := int64(max(p.NodeGPUs, 1))
	t, s := max(in.TP, 1), max(in.PP, 1)
	pick := func(span int64) link {
		if span > node {
			return net()
		}
		return intra
	}
	tp = pick(t)
	pp = pick(t * s)
	dp = pick(int64(max(p.GPUs, 1)) * t * s)
	// HYBRID_SHARD's shard group is a node's ranks: its gathers and
	// reduce-scatters stay within it, its replicas' all-reduce crosses
	shard = pick(int64(max(p.ShardRanks(), 1)) * t * s)
	if len(notes) > 1 {
		notes = notes[:1]
	}
	return dp, tp, pp, shard, notes
}

// Communication predicts a step's communication and how much of it the
// step waits for.
func Communication(in CommInput) (Comm, error) {
	if !in.Link.Known() {
		return Comm{}, fmt.Errorf("no interconnect known for this GPU: multi-GPU step time needs its NVLink or PCIe rate")
	}
	c := Comm{OptimizerShare: 1}
	if p := in.Setup.Parallel; p.On() && !p.Offload && (p.IsZeRO() || p.IsFSDP() && p.Sharding != train.NoShard) {
		r := p.GPUs
		if p.IsFSDP() {
			r = p.ShardRanks()
		}
		c.OptimizerShare = 1 / float64(max(r, 1))
	}
	dp, mp, pl, sl, notes := links(in)
	c.Notes = notes
	c.DataLink, c.ModelLink, c.PipeLink = dp.name, mp.name, pl.name
	acc := float64(max(in.Setup.Accumulate, 1))
	e := in.Compute
	fwd := e.By[Forward] / acc
	bwd := (e.By[Backward] + e.By[Recompute]) / acc
	p := in.Setup.Parallel
	cm := in.Comms
	add := func(bytes float64, n float64) {
		c.Bytes += bytes * n
		c.Collectives += int64(n)
	}
	if p.On() {
		var total, exposed, last float64
		switch {
		case p.Strategy == train.DDP || p.IsFSDP() && p.Sharding == train.NoShard:
			total, exposed, last = ddpComm(dp, cm, p.GPUs, bwd)
			for _, b := range cm.Buckets {
				add(float64(b), acc)
			}
			total, exposed = total*acc, exposed*acc
		case cm.Units != nil:
			total, exposed, last = shardedComm(sl, dp, cm, p, fwd, bwd)
			for _, u := range cm.Units {
				n := 1.0
				if u.Reduce > 0 {
					add(float64(u.Reduce), acc)
				}
				if !u.Root && (p.Sharding == train.FullShard || p.Sharding == train.HybridShard || p.Strategy == train.ZeRO3) {
					n = 2
				}
				add(float64(u.Gather), n*acc)
			}
			total, exposed = total*acc, exposed*acc
		case p.IsZeRO():
			rs := bucketed(dp, train.ReduceScatter, float64(cm.Grads), float64(cm.ReduceBucket), p.GPUs)
			ag := bucketed(dp, train.AllGather, float64(cm.Params), float64(cm.GatherBucket), p.GPUs)
			times := acc // stage 2 reduces every micro-batch
			if p.Strategy == train.ZeRO1 {
				times = 1 // stage 1 at the accumulation boundary
			}
			total = rs*times + ag
			exposed, last = total, rs
			add(float64(cm.Grads), times)
			add(float64(cm.Params), 1)
		}
		c.Host = offloadCopies(in, cm, acc)
		if p.Offload {
			c.Notes = append(c.Notes, "offload: the optimizer step on the CPU is not timed (only the copies to and from the host are): the step is longer than shown")
		}
		c.Data, c.DataExposed, c.LastBucket = total, exposed, last
	}
	tp := int(max(in.TP, 1))
	if tp > 1 {
		recompute := in.Setup.Checkpoint.On()
		var t float64
		for _, m := range cm.Model {
			b := float64(m.Bytes)
			if m.FwdOn {
				t += mp.ring(m.Fwd, b, tp)
				add(b, acc)
				if recompute && m.Region >= 0 {
					t += mp.ring(m.Fwd, b, tp)
					add(b, acc)
				}
			}
			if m.BackOn {
				t += mp.ring(m.Back, b, tp)
				add(b, acc)
			}
			if m.Twice {
				t += mp.ring(train.AllGather, b, tp)
				add(b, acc)
			}
		}
		c.Tensor = t * acc
	}
	if in.PP > 1 {
		m := acc
		pp := float64(in.PP)
		// one send and one receive of the boundary activations (or
		// their gradient) per micro-batch, point to point: one hop
		send := ringBaseLatency + pl.hop + float64(cm.Boundary)/pl.bw
		c.Pipeline = 2 * m * send
		add(float64(cm.Boundary), 2*m)
		perMicro := fwd + bwd + c.Tensor/m + c.Pipeline/m
		c.Bubble = (pp - 1) * perMicro
	}
	c.Seconds = c.Data + c.Tensor + c.Pipeline + c.Host
	c.Exposed = c.DataExposed + c.Tensor + c.Pipeline + c.Host
	return c, nil
}

// offloadCopies is the time of CPU offload's copies over the host link,
// counted exposed (FSDP's _unshard copies the shard in before the
// all-gather it feeds; DeepSpeed's offload waits on its copies before the
// CPU step): with parameters on the host, every gather's shard comes in
// and every reduced gradient shard goes out (FSDP's CPUOffload, ZeRO-3's
// offload_param); with ZeRO's offload_optimizer the gradient partition
// goes out (each micro-batch at stages 2 and 3, at the boundary at stage
// 1) and the updated parameter partition comes back once a step.
func offloadCopies(in CommInput, cm train.Comms, acc float64) float64 {
	p := in.Setup.Parallel
	bw := in.Link.Host * gpu.PCIeShare
	if !(p.Offload || p.OffloadParams) || bw <= 0 {
		return 0
	}
	var bytes float64
	if p.IsFSDP() && p.Offload || p.OffloadParams {
		regather := p.Sharding == train.FullShard || p.Sharding == train.HybridShard || p.Strategy == train.ZeRO3
		for _, u := range cm.Units {
			n := 1.0
			if regather && !u.Root {
				n = 2
			}
			bytes += acc * n * float64(u.Shard)
			if u.Reduce > 0 && p.IsFSDP() {
				bytes += acc * float64(u.Shard)
			}
		}
	}
	if p.IsZeRO() && p.Offload {
		r := float64(max(p.GPUs, 1))
		times := acc
		if p.Strategy == train.ZeRO1 {
			times = 1
		}
		bytes += times*float64(cm.Grads)/r + float64(cm.Params)/r
	}
	return bytes / bw
}

// bucketed is a collective of total bytes cut into buckets of at most
// bucket bytes, one after another.
func bucketed(l link, k train.CollKind, total, bucket float64, n int) float64 {
	if total <= 0 {
		return 0
	}
	if bucket <= 0 {
		bucket = total
	}
	full := math.Floor(total / bucket)
	t := full * l.ring(k, bucket, n)
	if rest := total - full*bucket; rest > 0 {
		t += l.ring(k, rest, n)
	}
	return t
}

// ddpComm is one micro-batch's bucket all-reduces under a backward of bwd
// seconds: bucket i is ready when the gradients up to and including it
// are (backward's progress taken as the share of gradient bytes done), and
// the buckets go one after another. It returns the all-reduces' time, what
// outlasts backward, and the last bucket's time.
func ddpComm(l link, c train.Comms, n int, bwd float64) (total, exposed, last float64) {
	var all float64
	for _, b := range c.Buckets {
		all += float64(b)
	}
	if all <= 0 {
		return 0, 0, 0
	}
	var done, free float64
	for _, b := range c.Buckets {
		done += float64(b)
		ready := bwd * done / all
		t := l.ring(train.AllReduce, float64(b), n)
		free = math.Max(free, ready) + t
		total += t
		last = t
	}
	return total, math.Max(free-bwd, 0), last
}

// shardedComm schedules one micro-batch of FSDP or ZeRO-3 on a compute
// stream and a communication queue, the shard group's collectives on l
// and HYBRID_SHARD's all-reduce across replicas on replicas. It returns every collective's time,
// the time the micro-batch takes beyond its compute, and the exposed
// floor (the root's reduce-scatter, or ZeRO-3's last bucket).
func shardedComm(l, replicas link, c train.Comms, p train.Parallel, fwd, bwd float64) (total, exposed, last float64) {
	units := c.Units
	nb := len(units) - 1 // blocks; the last unit is the root
	var weight float64
	for _, u := range units {
		weight += float64(u.Weight)
	}
	if weight <= 0 || nb < 0 {
		return 0, 0, 0
	}
	r := c.Ranks
	ag := func(u int) float64 { return l.ring(train.AllGather, float64(units[u].Gather), r) }
	rs := func(u int) float64 { return l.ring(train.ReduceScatter, float64(units[u].Reduce), r) }
	// HYBRID_SHARD all-reduces each reduced shard across the replicas
	// (over the network when they span nodes, as they do)
	hy := func(u int) float64 {
		if c.Replicas <= 1 {
			return 0
		}
		return replicas.ring(train.AllReduce, float64(units[u].Reduce)/float64(max(r, 1)), c.Replicas)
	}
	cf := func(u int) float64 { return fwd * float64(units[u].Weight) / weight }
	cb := func(u int) float64 { return bwd * float64(units[u].Weight) / weight }
	zero3 := p.Strategy == train.ZeRO3
	regather := p.Sharding == train.FullShard || p.Sharding == train.HybridShard || zero3

	// forward: the root's parameters first (its pre-forward hook), then
	// each block's; a block's all-gather starts once the queue is free
	// and, at most two in flight, once the block two before has computed
	var q, s float64 // queue free, compute free
	root := nb
	t := ag(root)
	q += t
	total += t
	doneAt := make([]float64, nb+1) // compute end per block
	for u := 0; u < nb; u++ {
		start := q
		if u >= 2 && !zero3 {
			start = math.Max(start, doneAt[u-2])
		}
		t := ag(u)
		q = start + t
		total += t
		s = math.Max(s, q) + cf(u)
		doneAt[u] = s
	}
	s = math.Max(s, q) + cf(root) // the head, with the root's parameters
	// backward: the root's (the head's) first, not resharded; then the
	// blocks in reverse, each gathered again (prefetched one ahead) and
	// reduce-scattered after; the root's reduce-scatter once its
	// embeddings' gradients are done, at the end
	s += cb(root)
	var bucket float64 // ZeRO-3's reduce bucket filling
	flushAt := func(at float64, final bool) {
		if bucket <= 0 {
			return
		}
		t := l.ring(train.ReduceScatter, bucket, r)
		q = math.Max(q, at) + t
		total += t
		if final {
			last = t
		}
		bucket = 0
	}
	gatherAt := make([]float64, nb)
	if regather && nb > 0 {
		t := ag(nb - 1)
		q = math.Max(q, s-cb(root)) + t
		total += t
		gatherAt[nb-1] = q
	}
	for u := nb - 1; u >= 0; u-- {
		start := s
		if regather {
			start = math.Max(start, gatherAt[u])
		}
		if regather && u > 0 {
			// the prefetch of the next unit, issued as this one starts
			t := ag(u - 1)
			q = math.Max(q, start) + t
			total += t
			gatherAt[u-1] = q
		}
		s = start + cb(u)
		if zero3 {
			bucket += float64(units[u].Reduce)
			if bucket >= float64(c.ReduceBucket) {
				flushAt(s, false)
			}
			continue
		}
		t := rs(u) + hy(u)
		q = math.Max(q, s) + t
		total += t
	}
	if zero3 {
		bucket += float64(units[root].Reduce)
		flushAt(s, true)
	} else {
		last = rs(root) + hy(root)
		q = math.Max(q, s) + last
		total += last
	}
	end := math.Max(s, q)
	return total, end - (fwd + bwd), last
}

// WithComm is the step's estimate with its communication: the optimizer
// step cut to this rank's shard, the exposed communication and the
// pipeline's bubble added.
func (e Estimate) WithComm(c Comm) Estimate {
	if c.OptimizerShare > 0 && c.OptimizerShare < 1 {
		cut := e.By[Optimizer] * (1 - c.OptimizerShare)
		e.By[Optimizer] -= cut
		e.Seconds -= cut
		cut = e.Bound.By[Optimizer] * (1 - c.OptimizerShare)
		e.Bound.By[Optimizer] -= cut
		e.Bound.Seconds -= cut
	}
	// the bound waits for the same communication (its overlap with
	// backward is the calibrated model's)
	e.Seconds += c.Exposed + c.Bubble
	e.Bound.Seconds += c.Exposed + c.Bubble
	if e.Seconds > 0 {
		e.MFU = e.IdealSeconds / e.Seconds
	}
	if e.Bound.Seconds > 0 {
		e.Bound.MFU = e.IdealSeconds / e.Bound.Seconds
	}
	return e
}
