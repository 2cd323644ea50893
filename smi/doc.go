// Package smi reads what nvidia-smi shows: every GPU's memory and
// utilisation, and the processes on it with the memory each holds. By
// default it runs the nvidia-smi command (which the driver installs, and
// which reads NVML), so a plain build needs no C compiler; built with
// -tags nvml (and cgo) it reads NVML (NVIDIA's management library,
// libnvidia-ml.so.1) in process through github.com/NVIDIA/go-nvml, which
// loads the library when Open is called. Either runs on machines with or
// without a driver; without one Open returns ErrNoDriver.
// Everything else sees the Reader interface, which Fake implements for
// tests.
//
// NVML's "used" memory of a process is what the driver has given it: for a
// PyTorch process, the caching allocator's reserved memory plus the CUDA
// context and the libraries' own allocations (cuBLAS, cuDNN, NCCL), which
// is why it exceeds torch.cuda.memory_reserved.
package smi
