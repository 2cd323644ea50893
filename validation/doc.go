// Package validation holds batchfit's checks against real PyTorch.
//
// reference.py (CPU PyTorch, runs in CI) records parameter counts and the
// bytes autograd saves for backward for the seed networks and the
// torchvision models; the Go tests here build the same models from the zoo,
// simulate them under the matching runtime profile, and compare.
// step.py (CPU PyTorch, runs in CI) follows every allocation and free of
// whole training steps — forward, backward, the optimizer step, zero_grad —
// through c10's profiled CPU allocator; TestStepReference holds the
// simulator's live bytes to it: before each step, at its peak and in which
// phase, and at the peak and end of every phase.
// generate.py (CPU PyTorch, runs in CI) decodes greedily with a toy
// decoder and a DynamicCache-style torch.cat cache under no_grad;
// TestGenerateAgainstTorchCPU holds train.Generate to it, forward by
// forward and cache update by cache update.
// measure.py (CUDA PyTorch, runs on a GPU) records peak allocated and
// reserved memory of real training steps for the accuracy tests.
// cs336.py (CPU PyTorch) records what autograd saves for the CS336
// language model; TestCS336AgainstTorchCPU holds the zoo's cs336 models to
// it.
//
// The GPU corpus (testdata/gpu) holds figures other people measured on
// NVIDIA GPUs: LoadGPUCorpus reads and checks its cases, MeasureSnapshot
// reads the peaks of a memory snapshot recording, and CompareGPUCorpus
// predicts each case from its estimate command line; TestGPUCorpus holds
// the predictions to fixed thresholds (docs/accuracy.md, section 11).
// cmd/snapstrip writes the corpus's stripped recordings.
//
// The throughput calibration set (testdata/throughput) holds single-GPU
// training throughput that NVIDIA and Lambda published: LoadThroughput
// reads it, PredictThroughput predicts a row from its estimate command line
// and CompareThroughput and SummarizeThroughput set predictions beside the
// figures (errors per source and per GPU, pairs ordered, saturation over
// batch size); TestThroughputCalibration prints them. dispatch_cpu.py
// measures eager PyTorch's host cost per op on the CPU.
package validation
