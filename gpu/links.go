package gpu

// Link is how a GPU reaches the other GPUs of its job, as the datasheets
// give it. Bandwidths are per GPU and per direction, bytes/s: a ring
// collective sends and receives at once, so what bounds it is one
// direction's rate (datasheets quote NVLink as the sum of both directions:
// H100 SXM's 900 GB/s is 450 GB/s each way). Achievable is the share of it
// NCCL's ring reaches (see NVLinkShare, PCIeShare, NetShare).
type Link struct {
	// Intra is the rate between the GPUs of one node: NVLink through
	// NVSwitch where NVLink says so, the PCIe slot otherwise (an NVLink
	// bridge joins two cards only, so a ring over more runs over PCIe).
	Intra  float64
	NVLink bool
	// Inter is the rate between nodes per GPU (its share of the node's
	// network adapters); 0 when the catalog knows no usual system for the
	// GPU.
	Inter float64
	// Host is the rate to the host's memory (what CPU offload crosses):
	// the PCIe slot, or NVLink-C2C on a Grace Hopper.
	Host float64
	// NVLinks is the number of NVLink links per GPU (the datasheets:
	// 18 on Hopper and Blackwell SXM, 12 on A100 SXM, 6 on V100 SXM2), 0
	// without NVLink. NCCL builds its topology from the links it counts,
	// each at its own per-link rate (ncclTopoNVLinkBw in src/graph/topo.h
	// of NVIDIA/nccl), which is what its NVLS model runs over.
	NVLinks int
	// Major is the compute capability major of the GPUs the link joins
	// (the catalog fills it from the GPU): NCCL enables NVLink SHARP
	// only from 9.0 on.
	Major  int
	Source string
}

// Known reports whether the link was filled in.
func (l Link) Known() bool { return l.Intra > 0 }

// The shares of a link's rate NCCL's ring algorithm reaches, bus bandwidth
// (nccl-tests' busbw, which for an all-reduce is algbw × 2(n−1)/n) over
// the one-direction rate, at large messages. NVLink: 8×A100 SXM4 reach
// 230–250 GB/s of NVLink 3's 300 GB/s each way; PCIe: 8×H100 PCIe reach
// 35–45 GB/s of PCIe Gen5 x16's 64 GB/s (published nccl-tests
// all_reduce_perf figures, Alaya NeW's "NCCL-tests in practice", 2026).
// 8×H100 SXM5 reach 460–480 GB/s only with NVLink SHARP (NVLS), which
// reduces inside the switch: cost/nvls.go takes its time by NCCL's model
// where NCCL runs it, the ring's share otherwise. Between nodes no measurement was found here: the NVLink share is
// assumed, and docs/accuracy.md §4 says so.
const (
	NVLinkShare = 0.8
	PCIeShare   = 0.6
	NetShare    = 0.8
)

const gbs = 1e9

// links are the catalog GPUs' interconnects. Intra from each datasheet's
// interconnect row (halved where it gives both directions); Inter from the
// DGX systems' network adapters: DGX H100 and H200 and B200 eight 400 Gb/s
// ConnectX-7 (one per GPU, 50 GB/s), DGX A100 eight 200 Gb/s ConnectX-6
// (25 GB/s), DGX-1 with V100 four 100 Gb/s adapters for eight GPUs
// (6.25 GB/s). Host: PCIe Gen5 x16 on Hopper and Blackwell SXM boards
// (64 GB/s each way), Gen4 on A100 SXM (32 GB/s), Gen3 on V100 SXM2 (16
// GB/s); GH200's NVLink-C2C is 900 GB/s in both directions together.
var links = map[string]Link{
	"h100-80gb": {Intra: 450 * gbs, NVLink: true, NVLinks: 18, Inter: 50 * gbs, Host: 64 * gbs, Source: "H100 datasheet: NVLink 900 GB/s (SXM); DGX H100: 8× ConnectX-7 400 Gb/s"},
	"h100-pcie": {Intra: 64 * gbs, Inter: 0, Host: 64 * gbs, Source: "H100 datasheet: PCIe Gen5 128 GB/s (the 600 GB/s NVLink bridge joins two cards)"},
	"h200":      {Intra: 450 * gbs, NVLink: true, NVLinks: 18, Inter: 50 * gbs, Host: 64 * gbs, Source: "H200 datasheet: NVLink 900 GB/s (SXM); DGX H200: 8× ConnectX-7 400 Gb/s"},
	"gh200":     {Intra: 450 * gbs, NVLink: true, NVLinks: 18, Inter: 50 * gbs, Host: 450 * gbs, Source: "GH200 datasheet: NVLink 900 GB/s between superchips; one 400 Gb/s adapter each assumed"},
	"b200":      {Intra: 900 * gbs, NVLink: true, NVLinks: 18, Inter: 50 * gbs, Host: 64 * gbs, Source: "HGX B200 datasheet: NVLink 5 1.8 TB/s per GPU; DGX B200: 8× ConnectX-7 400 Gb/s"},
	"a100-80gb": {Intra: 300 * gbs, NVLink: true, NVLinks: 12, Inter: 25 * gbs, Host: 32 * gbs, Source: "A100 datasheet: NVLink 600 GB/s (SXM); DGX A100: 8× ConnectX-6 200 Gb/s"},
	"a100-40gb": {Intra: 300 * gbs, NVLink: true, NVLinks: 12, Inter: 25 * gbs, Host: 32 * gbs, Source: "A100 datasheet: NVLink 600 GB/s (SXM); DGX A100: 8× ConnectX-6 200 Gb/s"},
	"a10g":      {Intra: 32 * gbs, Host: 32 * gbs, Source: "A10 datasheet: PCIe Gen4 64 GB/s"},
	"a10":       {Intra: 32 * gbs, Host: 32 * gbs, Source: "A10 datasheet: PCIe Gen4 64 GB/s"},
	"a6000":     {Intra: 32 * gbs, Host: 32 * gbs, Source: "RTX A6000 datasheet: PCIe Gen4 x16 (the 112.5 GB/s NVLink bridge joins two cards)"},
	"rtx-3090":  {Intra: 32 * gbs, Host: 32 * gbs, Source: "GA102 whitepaper: PCIe Gen4 x16 (the NVLink bridge joins two cards)"},
	"l4":        {Intra: 32 * gbs, Host: 32 * gbs, Source: "L4 datasheet: PCIe Gen4 x16 64 GB/s"},
	"l40s":      {Intra: 32 * gbs, Host: 32 * gbs, Source: "L40S datasheet: PCIe Gen4 x16 64 GB/s"},
	"rtx-4090":  {Intra: 32 * gbs, Host: 32 * gbs, Source: "Ada whitepaper: PCIe Gen4 x16, no NVLink"},
	"t4":        {Intra: 16 * gbs, Host: 16 * gbs, Source: "T4 datasheet: PCIe Gen3 x16 32 GB/s"},
	"v100-16gb": {Intra: 150 * gbs, NVLink: true, NVLinks: 6, Inter: 6.25 * gbs, Host: 16 * gbs, Source: "V100 datasheet: NVLink 300 GB/s (SXM2); DGX-1: 4× 100 Gb/s InfiniBand for 8 GPUs"},
	"v100-32gb": {Intra: 150 * gbs, NVLink: true, NVLinks: 6, Inter: 6.25 * gbs, Host: 16 * gbs, Source: "V100 datasheet: NVLink 300 GB/s (SXM2); DGX-1: 4× 100 Gb/s InfiniBand for 8 GPUs"},
}
