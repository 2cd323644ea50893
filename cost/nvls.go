package cost

import (
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/train"
)

// NVLink SHARP (NVLS): on NVSwitch systems of compute capability 9.0 and
// later the switch reduces, and NCCL runs all-reduce, reduce-scatter and
// all-gather with its NVLS algorithm where its tuning model says it is the
// fastest. The model below is NCCL's own, as of release v2.28.3-1 of
// NVIDIA/nccl (the first with nvlsEfficiency), for the GPUs of one node:
//
//   - Enabled (src/transport/nvls.cc, ncclNvlsInit): NCCL_NVLS_ENABLE's
//     default 2 enables it where the driver reports multicast support,
//     which needs an NVSwitch; never on 2 GPUs or fewer. The NVLS graph
//     is searched only with an NVSwitch and compute capability ≥ 9.0
//     (src/graph/search.cc, ncclTopoCompute), and NCCL skips NVLS for
//     reduce-scatter and all-gather on more than NCCL_MAX_NVLS_ARITY (32)
//     local ranks (src/enqueue.cc, updateCollCostTable).
//   - The graph (ncclTopoCompute, ncclTopoSearchTryNvls): one channel per
//     GPU, each GPU a head; a channel takes its bandwidth bwIntra on every
//     GPU's NVSwitch link in each direction, twice on its head's, so a
//     GPU's link carries (n+1)·bwIntra. Its capacity is the GPU's NVLinks
//     at NCCL's per-link rate (ncclTopoNVLinkBw in src/graph/topo.h:
//     20.6 GB/s on SM90, 40.1 on SM100). bwIntra is the first speed of
//     the search's array that fits (sm90SpeedArrayIntra, or sm100's: a
//     single node's topology has no NICs, ncclTopoTrimSystem in
//     src/graph/paths.cc removes them); the second pass then raises
//     bwInter, which a single node's NVLS search never spends, a speed at
//     a time while it is below 2·bwIntra.
//   - The bandwidth (ncclTopoTuneModel in src/graph/tuning.cc): per
//     channel bwIntra · nvlsEfficiency · (n−1)/n, doubled for an
//     all-reduce ("AllReduce pipelines two operations"), times (n−1)/n
//     for the others, at most bwInter; times n channels. An all-reduce's
//     is a bus bandwidth, turned into the algorithm's by n/(2(n−1)) as
//     the ring's; reduce-scatter's and all-gather's is used as it is.
//   - The latency: hwLat's NVLink NVLS Simple entry, 25 µs, once.
//   - The time (ncclTopoGetAlgoTime): latency + S / algorithm bandwidth.
//
// Release v2.21.5-1 (PyTorch 2.5's) models NVLS without nvlsEfficiency:
// busBw = n · min(bwIntra, bwInter), times 5/6 for the algorithm
// bandwidth; on 8 H100s that is 266.7 GB/s against v2.28's 272.
const (
	nvlsLatency = 25e-6
	nvlsArity   = 32
)

// NCCL's search speeds for one node, GB/s (src/graph/search.cc).
var (
	sm90Speeds  = []float64{60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3}
	sm100Speeds = []float64{90, 80, 70, 60, 50, 40, 30, 24, 20, 19, 18}
)

// nvlsOn says whether NCCL would build NVLS on this link: NVLink through
// an NVSwitch and compute capability ≥ 9.0.
func nvlsOn(l gpu.Link) bool {
	return l.NVLink && l.NVLinks > 0 && l.Major >= 9
}

// nvlsGraph is NCCL's NVLS graph on n GPUs of one node: bwIntra and
// bwInter per channel (GB/s), and nvlsEfficiency; ok false where there is
// none.
func nvlsGraph(l gpu.Link, n int) (intra, inter, eff float64, ok bool) {
	if !nvlsOn(l) || n <= 2 || n > nvlsArity {
		return 0, 0, 0, false
	}
	perLink, speeds, eff := 20.6, sm90Speeds, 0.85
	if l.Major >= 10 {
		perLink, speeds, eff = 40.1, sm100Speeds, 0.74
	}
	capacity := float64(l.NVLinks) * perLink
	// the search's first speed: none above the link (maxBw), none whose n
	// channels pass totalBw·n/(n−1); then down until the graph fits
	i := 0
	for i < len(speeds)-1 && (speeds[i] > capacity || speeds[i]*float64(n) > capacity*float64(n)/float64(n-1)) {
		i++
	}
	for ; i < len(speeds); i++ {
		if float64(n+1)*speeds[i] <= capacity {
			break
		}
	}
	if i == len(speeds) {
		return 0, 0, 0, false
	}
	intra = speeds[i]
	j := i
	for j > 0 && speeds[j] < 2*intra {
		j--
	}
	return intra, speeds[j], eff, true
}

// NVLSBusBandwidth is the bandwidth NCCL's model gives NVLS for a
// collective on n GPUs of one node, bytes/s: an all-reduce's bus
// bandwidth (nccl-tests' convention), reduce-scatter's and all-gather's
// algorithm bandwidth (NCCL converts neither). 0 where NCCL runs no NVLS.
func NVLSBusBandwidth(l gpu.Link, k train.CollKind, n int) float64 {
	intra, inter, eff, ok := nvlsGraph(l, n)
	if !ok {
		return 0
	}
	f := float64(n-1) / float64(n)
	ch := intra * eff * f
	if k == train.AllReduce {
		ch *= 2
	} else {
		ch *= f
	}
	return float64(n) * min(ch, inter) * 1e9
}

// NVLSSeconds is NVLS's time by NCCL's model for a collective of bytes
// over n GPUs of one node on link l: 0 where NCCL runs no NVLS.
func NVLSSeconds(l gpu.Link, k train.CollKind, bytes float64, n int) float64 {
	bw := NVLSBusBandwidth(l, k, n)
	if bw <= 0 || bytes <= 0 {
		return 0
	}
	if k == train.AllReduce {
		return nvlsLatency + 2*float64(n-1)/float64(n)*bytes/bw
	}
	return nvlsLatency + bytes/bw
}
