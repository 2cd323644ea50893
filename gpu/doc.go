// Package gpu is the device catalog: for each GPU, the memory capacity the
// device reports, its compute capability (which decides the cuBLAS
// workspace size, see package profile) and the memory the CUDA context takes
// outside PyTorch's allocator.
//
// A GPU's capacity is what PyTorch can use: the total cudaMemGetInfo
// reports, as PyTorch prints it in its out-of-memory message ("GPU 0 has a
// total capacity of 79.11 GiB"), taken from real messages in public
// reports. It is less than nvidia-smi's memory.total, which the catalog
// keeps beside it, by what the driver keeps for itself. A GPU no message
// covers gets nvidia-smi's total times the smallest share measured on its
// family, and is marked derived. The CUDA context size depends on the driver, the CUDA version and the
// kernels loaded (PyTorch sets CUDA_MODULE_LOADING=LAZY); the figures here
// are per family and are the part of a prediction most worth measuring on
// your own machine (batchfit validate, or --context).
package gpu
