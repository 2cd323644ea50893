package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
)

// gpuRuleNotes are what the GPU-only rules (cuDNN workspaces, the cuBLAS
// workspace) cannot know without the device: said, never hidden.
func gpuRuleNotes(res *predict.Result) []string {
	var out []string
	s, sum := res.Setup, res.Summary
	if sum.ConvWorkspaceBytes > 0 {
		out = append(out, fmt.Sprintf("cuDNN convolution workspaces are taken at an upper bound, the explicit-GEMM algorithm's unfolded input (the largest here %s), because the algorithm cuDNN's heuristic picks is not known without the GPU: it usually needs less; FFT algorithms, seldom picked, can need more. A workspace never fails a step: where the allocator cannot supply one even after freeing its cache, PyTorch catches the out-of-memory error and takes the next algorithm, down to one that needs none (Conv_v7.cpp try_all, Conv_v8.cpp try_configs); batchfit, not knowing the sizes in between, takes the one that needs none", fmtBytes(sum.ConvWorkspaceBytes)))
	}
	if n := res.Timeline.FellBack; n > 0 {
		out = append(out, fmt.Sprintf("%d cuDNN workspace allocations did not fit even after the allocator freed its cache, so those convolutions ran another algorithm, taken to need no workspace (cuDNN's cache keeps the choice for the configuration); this step is near the device's limit", n))
	}
	if sum.CudnnSearches > 0 {
		n := fmt.Sprintf("--cudnn-benchmark: %d cuDNN algorithm searches in the first step, each taken at the same bound; a search may use up to the largest free block (CUDACachingAllocator::cacheInfo), so the first step's peak reserved can be higher than shown, though a search alone never runs out of memory", sum.CudnnSearches)
		switch s.Profile.CudnnBenchmarkEmptyCache {
		case "during_search":
			n += fmt.Sprintf("; PyTorch %s empties the cache during each search and keeps the search workspace reserved after it (Conv_v7.cpp)", s.Profile.Version)
		case "after_search":
			n += fmt.Sprintf("; PyTorch %s empties the cache after each search (Conv_v8.cpp)", s.Profile.Version)
		default:
			n += fmt.Sprintf("; the search workspace is kept reserved after each search (not read from PyTorch %s's source: the larger figure)", s.Profile.Version)
		}
		out = append(out, n)
	}
	if s.CudnnBenchmark && sum.CudnnSearches == 0 {
		// accepted, but said: a flag that changes nothing is not taken
		// silently
		out = append(out, "--cudnn-benchmark changes nothing here: no cuDNN convolution runs, so nothing is searched")
	}
	if s.Profile.CudaModuleLoading == "lazy_from_cuda_11_7" && res.Context == res.GPU.ContextSize+res.Libraries {
		out = append(out, fmt.Sprintf("the CUDA context (%s) assumes lazy kernel loading, which PyTorch %s's CUDA 11.7 build has; its CUDA 11.6 build loads every kernel at start-up, over 1 GiB by public measurements (docs/accuracy.md §3.1): give --context then", fmtBytes(res.GPU.ContextSize), s.Profile.Version))
	}
	if c := s.CublasWorkspaceConfig; c != "" {
		if _, ok, _ := profile.ParseCublasWorkspaceConfig(c); !ok {
			out = append(out, fmt.Sprintf("CUBLAS_WORKSPACE_CONFIG %q has no :SIZE:COUNT pair: PyTorch warns and keeps the default cuBLAS workspace, %s", c, fmtBytes(s.Profile.CublasWorkspace(res.GPU.Major))))
		}
	}
	return out
}
