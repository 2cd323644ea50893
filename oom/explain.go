package oom

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/alloc"
)

// Cause is the main reason an allocation failed, as far as the message's
// figures tell.
type Cause string

const (
	// CauseExceedsDevice: the single request is larger than the device.
	CauseExceedsDevice Cause = "exceeds_device"
	// CauseMemoryFraction: the limit from
	// torch.cuda.set_per_process_memory_fraction refused the cudaMalloc.
	CauseMemoryFraction Cause = "memory_fraction"
	// CauseFragmentation: cached but unallocated memory alone was larger
	// than the request, but no cached block was large enough.
	CauseFragmentation Cause = "fragmentation"
	// CauseTensorsFillGPU: the live tensors take most of what PyTorch
	// reserved and the request is no larger than a page of an expandable
	// segment, so the memory not in use lies in pieces that no allocator
	// setting can join for it: the job is too large for the GPU.
	CauseTensorsFillGPU Cause = "tensors_fill_gpu"
	// CauseSplitFree: free device memory and cached memory together covered
	// the request, neither alone did.
	CauseSplitFree Cause = "free_memory_split"
	// CauseOtherProcesses: the shortfall is smaller than what other
	// processes hold on the device.
	CauseOtherProcesses Cause = "other_processes"
	// CauseInsufficientMemory: the job needs more memory than the device
	// had left.
	CauseInsufficientMemory Cause = "insufficient_memory"
	// CauseUnexplained: the driver reported more free memory than the
	// request, so the figures do not account for the failure.
	CauseUnexplained Cause = "unexplained"
)

// Words is the cause in words, as the report's headline says it (the
// Cause itself is a stable label for JSON).
func (c Cause) Words() string {
	switch c {
	case CauseExceedsDevice:
		return "the request is larger than the whole GPU"
	case CauseMemoryFraction:
		return "refused by the per-process memory fraction limit"
	case CauseFragmentation:
		return "the cache is fragmented: enough memory is cached, but no cached block is large enough"
	case CauseTensorsFillGPU:
		return "the job's live tensors fill the GPU: what is left lies in pieces too small for the request, which no allocator setting can join"
	case CauseSplitFree:
		return "the memory it needed was split between free GPU memory and PyTorch's cache, neither large enough alone"
	case CauseOtherProcesses:
		return "other processes hold the memory it needed"
	case CauseInsufficientMemory:
		return "the job needs more memory than the GPU had left"
	case CauseUnexplained:
		return "the message's figures do not account for the failure"
	}
	return string(c)
}

// Explanation is a diagnosis computed from a Message alone. Sizes are in
// bytes and carry the imprecision of the printed figures (see Resolution).
type Explanation struct {
	Message Message `json:"message"`
	Cause   Cause   `json:"cause"`
	// Summary is a one-sentence diagnosis.
	Summary string `json:"summary"`

	Requested int64 `json:"requested_bytes"`
	// RequestMeaning says what the "Tried to allocate" figure implies
	// about the size of the tensor behind it.
	RequestMeaning string `json:"request_meaning"`
	// SegmentSized is true when Requested is exactly one of the fixed
	// segment sizes (2 MiB, 20 MiB), so the tensor itself was smaller.
	SegmentSized bool `json:"segment_sized"`

	Free                int64 `json:"free_bytes"`
	ReservedUnallocated int64 `json:"reserved_unallocated_bytes"`
	// Available is Free + ReservedUnallocated: everything that was not in
	// use by tensors, whether it was usable or not.
	Available int64 `json:"available_bytes"`
	// Deficit is Requested − Available. When it is not positive the memory
	// existed but could not be used in one piece.
	Deficit int64 `json:"deficit_bytes"`
	// Uncertainty bounds the rounding error of Deficit.
	Uncertainty int64 `json:"uncertainty_bytes"`

	// OutsidePyTorch is Total − Free − Reserved: memory on the device that
	// PyTorch's allocator does not hold.
	OutsidePyTorch int64 `json:"outside_pytorch_bytes"`
	// ThisProcessOutside is ProcessInUse − Reserved: this process's memory
	// outside the allocator (CUDA context, libraries), when NVML reported
	// this process; otherwise 0.
	ThisProcessOutside int64 `json:"this_process_outside_bytes,omitempty"`
	// OtherProcesses is the sum over Message.OtherProcesses.
	OtherProcesses int64 `json:"other_processes_bytes,omitempty"`
	// SelfAmbiguous is true when NVML did not name this process but listed
	// a process holding at least what PyTorch reserved: inside a container
	// NVML's PIDs differ from the process's own, so that entry is probably
	// this process and OtherProcesses overstates the others.
	SelfAmbiguous bool `json:"self_ambiguous,omitempty"`

	// ExceedsDevice: Requested > Total.
	ExceedsDevice bool `json:"exceeds_device"`
	// ExceedsAllowed: a memory fraction is set and Reserved + Requested is
	// above it.
	ExceedsAllowed bool `json:"exceeds_allowed"`
	// CachedCouldServe: ReservedUnallocated ≥ Requested, so only
	// fragmentation (or the block being on another stream or pool) kept
	// the cache from serving the request.
	CachedCouldServe bool `json:"cached_could_serve"`
	// Stranded is true when Free and ReservedUnallocated together covered
	// the request, yet no allocator setting could have served it from them:
	// see strandedPieces.
	Stranded bool `json:"stranded,omitempty"`
	// MaxSplitSizeMB is the max_split_size_mb value recommended against
	// fragmentation, or 0 when that setting cannot help this request.
	MaxSplitSizeMB int64 `json:"max_split_size_mb,omitempty"`

	// Findings are statements of fact derived from the figures.
	Findings []string `json:"findings"`
	// Steps are concrete next steps, most effective first.
	Steps []string `json:"steps"`
}

// max_split_size_mb must be more than kLargeBuffer/MiB in PyTorch ≤ 2.x
// ("must be > 20"), at least 20 in the newest AcceleratorAllocatorConfig;
// recommending at least 21 is valid in all.
const minMaxSplitMB = alloc.LargeBuffer/miB + 1

// Explain diagnoses m. Every statement in the result follows from m's
// figures and from the caching allocator's rules
// (c10/cuda/CUDACachingAllocator.cpp).
func Explain(m *Message) Explanation {
	e := Explanation{Message: *m, Requested: m.Requested, Free: m.Free, ReservedUnallocated: m.ReservedUnallocated}
	if m.OtherProcesses != nil {
		e.Message.OtherProcesses = append([]Process(nil), m.OtherProcesses...)
	}

	// Rounding bounds of the figures in play.
	resUnalloc := Resolution(m.ReservedUnallocated)
	resReserved := Resolution(m.Allocated) + resUnalloc
	if m.Format == Legacy {
		resUnalloc = Resolution(m.Reserved) + Resolution(m.Allocated)
		resReserved = Resolution(m.Reserved)
	}
	e.Available = m.Free + m.ReservedUnallocated
	e.Deficit = m.Requested - e.Available
	e.Uncertainty = Resolution(m.Requested) + Resolution(m.Free) + resUnalloc
	e.OutsidePyTorch = m.Total - m.Free - m.Reserved
	resOutside := Resolution(m.Total) + Resolution(m.Free) + resReserved
	if m.ProcessInUse > 0 {
		e.ThisProcessOutside = m.ProcessInUse - m.Reserved
	}
	for _, p := range m.OtherProcesses {
		e.OtherProcesses += p.Bytes
		if m.ProcessInUse == 0 && p.Bytes+Resolution(p.Bytes)+resReserved >= m.Reserved && m.Reserved > 0 {
			e.SelfAmbiguous = true
		}
	}
	e.ExceedsDevice = m.Requested > m.Total
	e.ExceedsAllowed = m.Allowed > 0 && m.Reserved+m.Requested > m.Allowed
	e.CachedCouldServe = m.ReservedUnallocated >= m.Requested
	e.Stranded = e.Deficit <= 0 && strandedPieces(m)
	e.RequestMeaning, e.SegmentSized = requestMeaning(m.Requested)

	req := alloc.FormatSize(m.Requested)
	free := alloc.FormatSize(m.Free)
	unalloc := alloc.FormatSize(m.ReservedUnallocated)
	avail := alloc.FormatSize(e.Available)
	about := func(diff, tol int64) string {
		if diff <= tol && diff >= -tol {
			return "about "
		}
		return ""
	}
	// atLeast says "x is at least y" honestly when the printed figures
	// cannot tell the two apart.
	atLeast := func(diff, tol int64) string {
		if diff <= tol {
			return "as large as, to within the rounding of the printed figures,"
		}
		return "more than"
	}
	freeAndCached := fmt.Sprintf("free + cached memory (%s free + %s reserved but unallocated = %s)", free, unalloc, avail)

	// Cause, in the order the allocator's checks decide it: the fraction
	// limit makes alloc_block fail before cudaMalloc is tried.
	switch {
	case e.ExceedsDevice:
		e.Cause = CauseExceedsDevice
		e.Summary = fmt.Sprintf("The request (%s) is larger than the whole GPU (%s); no allocator setting can make it fit.", req, alloc.FormatSize(m.Total))
	case e.ExceedsAllowed:
		e.Cause = CauseMemoryFraction
		e.Summary = fmt.Sprintf("The per-process memory limit stopped the allocation: %s reserved + %s requested = %s, above the %s allowed.",
			alloc.FormatSize(m.Reserved), req, alloc.FormatSize(m.Reserved+m.Requested), alloc.FormatSize(m.Allowed))
	case m.Free-m.Requested > Resolution(m.Free)+Resolution(m.Requested):
		e.Cause = CauseUnexplained
		e.Summary = fmt.Sprintf("The driver reported %s free, more than the %s requested, so these figures do not account for the failure.", free, req)
	case e.Stranded:
		e.Cause = CauseTensorsFillGPU
		e.Summary = fmt.Sprintf("The live tensors fill the GPU: %s allocated of the %s PyTorch could hold (free + reserved); the %s reserved but unallocated lies in pieces each smaller than this %s request, and only %s was free.",
			alloc.FormatSize(m.Allocated), alloc.FormatSize(m.Free+m.Reserved), unalloc, req, free)
	case e.CachedCouldServe:
		e.Cause = CauseFragmentation
		e.Summary = fmt.Sprintf("Fragmentation: %s was reserved by PyTorch but unallocated, %s the %s requested, yet no cached block was large enough.",
			unalloc, atLeast(m.ReservedUnallocated-m.Requested, e.Uncertainty), req)
	case e.Deficit <= 0:
		e.Cause = CauseSplitFree
		e.Summary = fmt.Sprintf("Free device memory (%s) and reserved-but-unallocated memory (%s) together (%s) cover the request (%s), but neither alone does.",
			free, unalloc, avail, req)
	case !e.SelfAmbiguous && e.OtherProcesses >= e.Deficit:
		e.Cause = CauseOtherProcesses
		e.Summary = fmt.Sprintf("The request (%s) exceeds %s by %s%s, and other processes hold %s on this GPU.",
			req, freeAndCached, about(e.Deficit, e.Uncertainty), alloc.FormatSize(e.Deficit), alloc.FormatSize(e.OtherProcesses))
	default:
		e.Cause = CauseInsufficientMemory
		e.Summary = fmt.Sprintf("The GPU is out of memory: the request (%s) exceeds %s by %s%s.",
			req, freeAndCached, about(e.Deficit, e.Uncertainty), alloc.FormatSize(e.Deficit))
	}

	// Findings.
	f := func(format string, args ...any) { e.Findings = append(e.Findings, fmt.Sprintf(format, args...)) }
	f("Tried to allocate %s: %s", req, e.RequestMeaning)
	if m.Total > 0 && m.Requested*100 >= m.Total {
		f("That is %.1f%% of the GPU's total capacity (%s).", 100*float64(m.Requested)/float64(m.Total), alloc.FormatSize(m.Total))
	}
	f("The driver reported %s free, measured after PyTorch had already returned every wholly free cached segment to the driver.", free)
	if m.PrivatePools > 0 {
		f("PyTorch reserved %s: %s allocated to tensors (%s of it in private pools such as CUDA Graphs) and %s reserved but unallocated.",
			alloc.FormatSize(m.Reserved), alloc.FormatSize(m.Allocated), alloc.FormatSize(m.PrivatePools), unalloc)
	} else {
		f("PyTorch reserved %s: %s allocated to tensors and %s reserved but unallocated.", alloc.FormatSize(m.Reserved), alloc.FormatSize(m.Allocated), unalloc)
	}
	if m.ReservedUnallocated > 0 {
		if e.Stranded {
			f("No cached block of the request's stream and pool was as large as the tensor behind it (at most %s), so every piece of the %s reserved but unallocated that could have served it was smaller than %s: smaller than a page of an expandable segment (%s in the large pool, %s in the small one). An allocator never moves live tensors, and expandable segments return only whole free pages to the driver, so no setting joins such pieces for this request; nor could a new page be mapped with %s free.",
				req, unalloc, req, alloc.FormatSize(alloc.LargeBuffer), alloc.FormatSize(alloc.SmallBuffer), free)
		} else if e.CachedCouldServe {
			f("The reserved-but-unallocated %s alone is %s the request (%s), but it lies in segments that also hold live tensors (wholly free ones were released unless a CUDA graph capture was under way), and a request is served only by one contiguous cached block of the same stream and pool: the cache is fragmented.",
				unalloc, atLeast(m.ReservedUnallocated-m.Requested, e.Uncertainty), req)
		} else {
			f("The reserved-but-unallocated %s is less than the request, so even an unfragmented cache could not have served it.", unalloc)
		}
	}
	if e.Deficit > 0 {
		f("The request exceeds %s by %s%s.", freeAndCached, about(e.Deficit, e.Uncertainty), alloc.FormatSize(e.Deficit))
	} else {
		f("The request does not exceed %s: the memory existed but not in one usable piece.", freeAndCached)
	}
	if e.OutsidePyTorch > resOutside && m.Total > 0 {
		f("%s (%.1f%% of the GPU) is used outside PyTorch's allocator (total − free − reserved): the CUDA context, libraries that call cudaMalloc directly, and other processes.",
			alloc.FormatSize(e.OutsidePyTorch), 100*float64(e.OutsidePyTorch)/float64(m.Total))
	}
	if m.ProcessInUse > 0 {
		f("NVML counts %s in use by this process, %s more than PyTorch reserved: this process's CUDA context and non-PyTorch allocations.",
			alloc.FormatSize(m.ProcessInUse), alloc.FormatSize(e.ThisProcessOutside))
	}
	if len(m.OtherProcesses) > 0 {
		pids := make([]string, len(m.OtherProcesses))
		for i, p := range m.OtherProcesses {
			pids[i] = fmt.Sprintf("%d (%s)", p.PID, alloc.FormatSize(p.Bytes))
		}
		f("%d other process(es) use %s on this GPU: %s.", len(m.OtherProcesses), alloc.FormatSize(e.OtherProcesses), strings.Join(pids, ", "))
	}
	if e.SelfAmbiguous {
		f("NVML did not identify this process, yet lists a process using at least the %s PyTorch reserved; inside a container NVML's PIDs differ from the process's own, so that process is probably this one.", alloc.FormatSize(m.Reserved))
	}
	if m.Allowed > 0 {
		verb := "within"
		if e.ExceedsAllowed {
			verb = "above"
		}
		f("A per-process limit of %s is set (torch.cuda.set_per_process_memory_fraction); PyTorch does not cudaMalloc beyond it, and reserved + request = %s is %s it.",
			alloc.FormatSize(m.Allowed), alloc.FormatSize(m.Reserved+m.Requested), verb)
	}
	if e.SegmentSized && m.Free < m.Requested {
		f("Even a fixed-size %s segment could not be obtained: the device is full.", req)
	}

	// Steps.
	s := func(format string, args ...any) { e.Steps = append(e.Steps, fmt.Sprintf(format, args...)) }
	reduce := "lower the batch size (keeping the effective batch with gradient accumulation), shorten sequences, enable activation checkpointing, train in bf16/fp16 mixed precision, or shard parameters, gradients and optimizer state across GPUs (FSDP/ZeRO)"
	switch e.Cause {
	case CauseExceedsDevice:
		s("Make this single allocation smaller than the GPU: it alone needs %s but the GPU has %s in total. Reduce the tensor behind it: a smaller batch or sequence length, or compute it in chunks; or split the model or activations across GPUs (tensor or pipeline parallelism).", req, alloc.FormatSize(m.Total))
	case CauseMemoryFraction:
		s("Raise or remove the limit set with torch.cuda.set_per_process_memory_fraction: with %s already reserved, this request needs at least %s allowed.", alloc.FormatSize(m.Reserved), alloc.FormatSize(m.Reserved+m.Requested))
		if m.Free >= m.Requested {
			s("The device itself had room: %s free for a request of %s.", free, req)
		}
	case CauseTensorsFillGPU:
		s("Reduce peak memory: the live tensors hold %s, %s of the %s the GPU leaves PyTorch. This allocation alone needed %s more free (%s requested, %s free), and the step allocates more after it: %s.",
			alloc.FormatSize(m.Allocated), pctOf(m.Allocated, m.Free+m.Reserved), alloc.FormatSize(m.Free+m.Reserved), alloc.FormatSize(m.Requested-m.Free), req, free, reduce)
		s("Run `batchfit maxbatch` (or `batchfit oom` with --model) for this model and GPU to find the largest batch that fits.")
		s("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True changes where later tensors are placed and may win back part of the %s reserved but unallocated, never more: it does not make room for the live tensors.", unalloc)
	case CauseFragmentation, CauseSplitFree:
		e.fragmentationSteps(s)
	case CauseUnexplained:
		s("Look for another process that allocated on this GPU at the same moment (nvidia-smi, DCGM): the free figure is measured after the failed cudaMalloc, so memory released in between shows as free.")
		s("If it happens again with the same figures, reproduce it with torch.cuda.memory._record_memory_history() and inspect the snapshot (`batchfit snapshot`).")
	case CauseOtherProcesses:
		s("Free the GPU from other processes (see nvidia-smi), or run this job on a GPU of its own: they hold %s, the shortfall is %s%s.", alloc.FormatSize(e.OtherProcesses), about(e.Deficit, e.Uncertainty), alloc.FormatSize(e.Deficit))
		s("Otherwise reduce peak memory by at least %s: %s.", alloc.FormatSize(e.Deficit), reduce)
	case CauseInsufficientMemory:
		s("Reduce peak memory by at least %s (more in practice: allocations later in the step also need room): %s.", alloc.FormatSize(e.Deficit), reduce)
		if e.OtherProcesses > 0 && !e.SelfAmbiguous {
			s("Stop the other processes on this GPU: they hold %s.", alloc.FormatSize(e.OtherProcesses))
		}
		if m.ReservedUnallocated > 0 && m.ReservedUnallocated*10 >= m.Requested {
			// A sizeable cache cannot serve this request but could serve
			// it if it were in one piece; fragmentation settings help at
			// the margin only.
			s("Fragmentation settings cannot close this gap alone: even all %s reserved but unallocated plus the %s free fall short by %s.", unalloc, free, alloc.FormatSize(e.Deficit))
		}
		s("Run `batchfit maxbatch` for this model and GPU to find the largest batch that fits.")
	}
	if e.Cause != CauseFragmentation && e.Cause != CauseSplitFree {
		s("torch.cuda.empty_cache() will not help: PyTorch already returned every wholly free cached segment to the driver before raising this error.")
	}
	return e
}

// fragmentationSteps adds the steps against fragmentation.
func (e *Explanation) fragmentationSteps(s func(string, ...any)) {
	m := &e.Message
	req := alloc.FormatSize(m.Requested)
	if m.Format == Legacy {
		s("Upgrade PyTorch and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: this message comes from PyTorch 2.0 or older, which lacks expandable segments. With them a segment grows by mapping pages, so free space is not stranded in fixed-size segments that still hold live tensors.")
	} else {
		s("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: a segment then grows by mapping pages (2 MiB small pool, 20 MiB large pool) instead of being a fixed-size cudaMalloc block, so free space is not stranded in segments that still hold live tensors.")
	}
	mib := m.Requested / miB
	if mib >= minMaxSplitMB {
		n := mib
		if n >= 32 {
			n = 1
			for n*2 <= mib {
				n *= 2
			}
		}
		e.MaxSplitSizeMB = n
		s("Or set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%d (at most this request's %s, rounded down): cached blocks of %d MiB or more are then never split for smaller tensors, and a request of that size, like this one, first releases such cached blocks to the driver before cudaMalloc is retried.", n, req, n)
	} else {
		s("max_split_size_mb cannot help this request: the setting must be more than 20 MiB and only governs blocks and requests at or above it, while this request is %s.", req)
	}
	s("torch.cuda.empty_cache() will not help: PyTorch already returned every wholly free cached segment to the driver before raising this error.")
	if e.Deficit > 0 {
		s("If the settings are not enough, reduce peak memory by at least %s.", alloc.FormatSize(e.Deficit))
	}
}

// strandedPieces reports whether the memory not in use could not have
// served m's request under any allocator setting, from
// CUDACachingAllocator.cpp's rules:
//   - "Tried to allocate" is alloc_size, at least the rounded tensor, and
//     malloc only asks for a new segment after get_free_block found no
//     cached block of the same stream and pool as large as the tensor; so
//     every such free block was smaller than the request.
//   - Expandable segments (the setting against fragmentation) map and
//     unmap memory in pages of kLargeBuffer (large pool) or kSmallBuffer
//     (small pool), and live blocks never move; a free piece smaller than a
//     page holds no whole page to unmap and map again where the request
//     needs it. A request of at most kLargeBuffer therefore leaves only
//     such pieces, and the free device memory (less than the request, or
//     cudaMalloc would have succeeded) is less than a page too.
//
// That alone does not make the job's size the cause: a cache that holds
// more than the live tensors is itself the larger part of reserved memory,
// and its history (which expandable segments change) is what to fix. The
// live tensors must also be at least as large as the reserved but
// unallocated memory, so that shrinking them is the larger lever.
func strandedPieces(m *Message) bool {
	return m.Requested <= alloc.LargeBuffer && m.Allocated >= m.ReservedUnallocated
}

// pctOf is part as a percentage of whole, for the report.
func pctOf(part, whole int64) string {
	if whole <= 0 {
		return "all"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// requestMeaning says what a "Tried to allocate" figure implies about the
// tensor, from get_allocation_size in CUDACachingAllocator.cpp: requests up
// to 1 MiB get a 2 MiB small-pool segment, requests under 10 MiB a 20 MiB
// segment, larger ones a segment of their size rounded up to 2 MiB.
func requestMeaning(r int64) (string, bool) {
	switch {
	case r == alloc.SmallBuffer:
		return "2.00 MiB is the segment size of the small pool, so the tensor itself needed at most 1 MiB (every request up to 1 MiB asks for a 2 MiB segment).", true
	case r == alloc.LargeBuffer:
		return "20.00 MiB is the segment size for requests between 1 MiB and 10 MiB, so the tensor itself needed between 1 and 10 MiB — or between 18 and 20 MiB, since requests of 10 MiB or more ask for their size rounded up to 2 MiB.", true
	case r >= alloc.MinLargeAlloc:
		return "the allocator asks for requests of 10 MiB or more rounded up to a multiple of 2 MiB, so this is the tensor's size to within 2 MiB.", false
	case r < alloc.SmallBuffer:
		return "this is smaller than any segment PyTorch allocates (2 MiB at least), so the message did not come from the default caching allocator's segment sizes.", false
	}
	return "the allocator asks for 2 MiB segments for requests up to 1 MiB and 20 MiB segments for requests below 10 MiB, so this figure is not a segment size of the default allocator; an allocator setting (such as expandable segments) may have changed it.", false
}

// Text renders the explanation as a report for a terminal.
func (e Explanation) Text() string {
	m := &e.Message
	var b strings.Builder
	layout := "PyTorch ≥ 2.1 message"
	if m.Format == Legacy {
		layout = "PyTorch ≤ 2.0 message"
	}
	fmt.Fprintf(&b, "CUDA out of memory on GPU %d (%s): %s\n\n", m.DeviceIndex, layout, e.Cause.Words())
	fmt.Fprintf(&b, "%s\n\n", e.Summary)

	type row struct {
		label, value, note string
	}
	rows := []row{
		{"tried to allocate", alloc.FormatSize(m.Requested), ""},
		{"GPU total capacity", alloc.FormatSize(m.Total), ""},
		{"free on the GPU", alloc.FormatSize(m.Free), ""},
		{"reserved by PyTorch", alloc.FormatSize(m.Reserved), ""},
		{"  allocated to tensors", alloc.FormatSize(m.Allocated), ""},
	}
	if m.PrivatePools > 0 {
		rows = append(rows, row{"    in private pools", alloc.FormatSize(m.PrivatePools), "CUDA Graphs"})
	}
	rows = append(rows,
		row{"  reserved, unallocated", alloc.FormatSize(m.ReservedUnallocated), ""},
		row{"outside PyTorch", alloc.FormatSize(e.OutsidePyTorch), "total − free − reserved"},
	)
	if m.ProcessInUse > 0 {
		rows = append(rows, row{"  this process", alloc.FormatSize(e.ThisProcessOutside), "CUDA context, libraries"})
	}
	if len(m.OtherProcesses) > 0 {
		note := fmt.Sprintf("%d process(es)", len(m.OtherProcesses))
		if e.SelfAmbiguous {
			note += ", probably including this one"
		}
		rows = append(rows, row{"  other processes", alloc.FormatSize(e.OtherProcesses), note})
	}
	if m.Allowed > 0 {
		rows = append(rows, row{"allowed (memory fraction)", alloc.FormatSize(m.Allowed), ""})
	}
	if e.Deficit > 0 {
		rows = append(rows, row{"shortfall", alloc.FormatSize(e.Deficit), "request − (free + reserved unallocated), ± " + alloc.FormatSize(e.Uncertainty)})
	} else {
		rows = append(rows, row{"surplus", alloc.FormatSize(-e.Deficit), "(free + reserved unallocated) − request, ± " + alloc.FormatSize(e.Uncertainty)})
	}
	lw, vw := 0, 0
	for _, r := range rows {
		lw = max(lw, len([]rune(r.label)))
		vw = max(vw, len(r.value))
	}
	for _, r := range rows {
		line := fmt.Sprintf("  %-*s  %*s", lw, r.label, vw, r.value)
		if r.note != "" {
			line += "   (" + r.note + ")"
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "  (figures as printed by PyTorch, each to ±half a unit of its last decimal)\n")

	b.WriteString("\nFindings:\n")
	for _, s := range e.Findings {
		fmt.Fprintf(&b, "  - %s\n", s)
	}
	b.WriteString("\nNext steps:\n")
	for i, s := range e.Steps {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, s)
	}
	return b.String()
}
