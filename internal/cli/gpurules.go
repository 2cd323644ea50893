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
		out = append(out, fmt.Sprintf("cuDNN convolution workspaces are taken at an upper bound, the explicit-GEMM algorithm's unfolded input (the largest here %s), because the algorithm cuDNN's heuristic picks is not known without the GPU: it usually needs less; FFT algorithms, seldom picked, can need more", fmtBytes(sum.ConvWorkspaceBytes)))
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
	if c := s.CublasWorkspaceConfig; c != "" {
		if _, ok, _ := profile.ParseCublasWorkspaceConfig(c); !ok {
			out = append(out, fmt.Sprintf("CUBLAS_WORKSPACE_CONFIG %q has no :SIZE:COUNT pair: PyTorch warns and keeps the default cuBLAS workspace, %s", c, fmtBytes(s.Profile.CublasWorkspace(res.GPU.Major))))
		}
	}
	return out
}
