// Package smi reads what nvidia-smi shows: every GPU's memory and
// utilisation, and the processes on it with the memory each holds. It
// reads NVML (NVIDIA's management library, libnvidia-ml.so.1) through
// github.com/NVIDIA/go-nvml, which loads the library when Open is called,
// so a binary built with cgo runs on machines with or without a driver;
// without one, and in a binary built without cgo, Open returns ErrNoDriver.
// Everything else sees the Reader interface, which Fake implements for
// tests.
//
// NVML's "used" memory of a process is what the driver has given it: for a
// PyTorch process, the caching allocator's reserved memory plus the CUDA
// context and the libraries' own allocations (cuBLAS, cuDNN, NCCL), which
// is why it exceeds torch.cuda.memory_reserved.
package smi
