// Package validation holds batchfit's checks against real PyTorch.
//
// reference.py (CPU PyTorch, runs in CI) records parameter counts and the
// bytes autograd saves for backward for the seed networks and the
// torchvision models; the Go tests here build the same models from the zoo,
// simulate them under the matching runtime profile, and compare.
// measure.py (CUDA PyTorch, runs on a GPU) records peak allocated and
// reserved memory of real training steps for the accuracy tests.
package validation
