package profile

// NCCL's communicator buffers, an upper bound from NCCL's source constants.
// NCCL allocates them with its own cudaMalloc/cuMem calls, outside
// PyTorch's caching allocator, when a communicator connects its channels.
// Sources: NVIDIA/nccl, src/include/device.h and src/init.cc at commit
// 0524aef7a0333bc79d885e392812519087eab71f (release 2.26.3,
// makefiles/version.mk; licence BSD-3).
const (
	// ncclSteps is NCCL_STEPS (device.h: 8).
	ncclSteps = 8
	// ncclLLLinesPerThread is NCCL_LL_LINES_PER_THREAD (device.h: 8).
	ncclLLLinesPerThread = 8
	// ncclLLMaxThreads is NCCL_LL_MAX_NTHREADS (device.h: 512).
	ncclLLMaxThreads = 512
	// ncclLLFifoLine is sizeof(union ncclLLFifoLine): four uint32 fields,
	// also read as two uint64 or one int4 (device.h: 16 bytes).
	ncclLLFifoLine = 16
	// ncclLL128ElemsPerThread is NCCL_LL128_ELEMS_PER_THREAD (device.h: 120).
	ncclLL128ElemsPerThread = 120
	// ncclLL128MaxThreads is NCCL_LL128_MAX_NTHREADS (device.h: 640).
	ncclLL128MaxThreads = 640

	// NCCLSimpleBuffSize is DEFAULT_BUFFSIZE, the Simple protocol's buffer
	// per connection (init.cc: 1 << 22, 4 MiB; NCCL_BUFFSIZE overrides
	// it). ARM hosts default to 1 MiB (DEFAULT_BUFFSIZE_ARM); the larger is
	// taken.
	NCCLSimpleBuffSize int64 = 1 << 22
	// NCCLLLBuffSize is DEFAULT_LL_BUFFSIZE (init.cc): lines per thread ×
	// threads × steps × sizeof(ncclLLFifoLine) = 512 KiB.
	NCCLLLBuffSize int64 = ncclLLLinesPerThread * ncclLLMaxThreads * ncclSteps * ncclLLFifoLine
	// NCCLLL128BuffSize is DEFAULT_LL128_BUFFSIZE (init.cc): elements per
	// thread × threads × steps × sizeof(uint64_t) = 4,915,200 bytes.
	NCCLLL128BuffSize int64 = ncclLL128ElemsPerThread * ncclLL128MaxThreads * ncclSteps * 8

	// NCCLMaxChannels is MAXCHANNELS (device.h: 64; 32 in older
	// releases): NCCL picks the channel count at run time
	// from the topology, never more than this, so the larger is taken.
	NCCLMaxChannels = 64
	// ncclMaxTreeArity is NCCL_MAX_TREE_ARITY (device.h: 3, two children
	// across nodes and one within).
	ncclMaxTreeArity = 3
	// NCCLConnsPerChannel is the receiving connections one rank sets up
	// per channel, each holding one buffer per protocol: the ring's one
	// from the previous rank, and the tree's children (up to
	// NCCL_MAX_TREE_ARITY) and parent. Send/receive (pipeline stages)
	// connects at most one peer each way per channel, within this bound.
	NCCLConnsPerChannel = 1 + ncclMaxTreeArity + 1
)

// NCCLConnBytes is one connection's buffers, Simple + LL + LL128, with the
// Simple buffer of simple bytes (NCCL_BUFFSIZE; 0 or less takes the
// default): 9,633,792 bytes (9.19 MiB) by default.
func NCCLConnBytes(simple int64) int64 {
	if simple <= 0 {
		simple = NCCLSimpleBuffSize
	}
	return simple + NCCLLLBuffSize + NCCLLL128BuffSize
}

// NCCLCommBytes bounds one communicator's buffers on one rank: channels ×
// connections per channel × one connection's buffers. A communicator of
// one rank connects nothing.
func NCCLCommBytes(ranks int, simple int64) int64 {
	if ranks <= 1 {
		return 0
	}
	return NCCLMaxChannels * NCCLConnsPerChannel * NCCLConnBytes(simple)
}
