// Package gpu is the device catalog: for each GPU, the memory capacity the
// device reports, its compute capability (which decides the cuBLAS
// workspace size, see package profile) and the memory the CUDA context takes
// outside PyTorch's allocator.
//
// Capacities are what nvidia-smi prints as memory.total for the device, in
// MiB. The CUDA context size depends on the driver, the CUDA version and the
// kernels loaded (PyTorch sets CUDA_MODULE_LOADING=LAZY); the figures here
// are per family and are the part of a prediction most worth measuring on
// your own machine (batchfit validate, or --context).
package gpu
