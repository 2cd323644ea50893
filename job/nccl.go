package job

import (
	"math"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/profile"
)

// checkNCCLBuffsize bounds --nccl-buffsize (NCCL_BUFFSIZE, bytes). NCCL
// keeps it in an int (struct ncclComm's buffSizes, src/include/comm.h), so
// it is at most 2^31−1 bytes; and one communicator holds it once per
// connection of every channel (profile.NCCLCommBytes), so a size whose one
// communicator alone fills the device leaves nothing for the job. Both are
// NCCL's buffers, said so, not a CUDA context.
func checkNCCLBuffsize(n int64, g gpu.GPU) error {
	if n > math.MaxInt32 {
		return Usagef("--nccl-buffsize: NCCL_BUFFSIZE of %s is more than NCCL reads (an int: at most %d bytes, 2 GiB)", alloc.FormatSize(n), math.MaxInt32)
	}
	if comm := profile.NCCLCommBytes(2, n); g.Capacity > 0 && comm >= g.Capacity {
		return Usagef("--nccl-buffsize: at NCCL_BUFFSIZE of %s one NCCL communicator's buffers take %s (%d channels × %d connections), more than the %s of %s",
			alloc.FormatSize(n), alloc.FormatSize(comm), profile.NCCLMaxChannels, profile.NCCLConnsPerChannel, alloc.FormatSize(g.Capacity), g.Name)
	}
	return nil
}
