package profile

import "testing"

func TestLookup(t *testing.T) {
	cases := []struct{ in, want string }{
		{"1.13", "1.13"}, {"1.13.1+cu117", "1.13"}, {"2.0.1", "2.0"}, {"2.4", "2.0"}, {"2.5.0a0", "2.5"},
		{"2.9", "2.5"}, {"2.10.1", "2.5"}, {"2.11.0+cu130", "2.11"}, {"2.12", "2.11"},
		{"", Default().Version}, {"current", Default().Version},
	}
	for _, c := range cases {
		p, err := Lookup(c.in)
		if err != nil || p.Version != c.want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", c.in, p, err, c.want)
		}
	}
	// 3.0 is no release the profiles know: refused, not taken as 2.5
	for _, bad := range []string{"0.4", "two", "1", "3.0", "10.1"} {
		if _, err := Lookup(bad); err == nil {
			t.Errorf("Lookup(%q): want an error", bad)
		}
	}
}

// Facts from PyTorch's source that the profiles must carry.
func TestProfileFacts(t *testing.T) {
	old, _ := Lookup("1.13")
	cur := Default()
	if old.ZeroGradSetToNone || !cur.ZeroGradSetToNone {
		t.Error("zero_grad(set_to_none=True) became the default in 2.0")
	}
	if old.OptimizerDefaultImpl != "forloop" || cur.OptimizerDefaultImpl != "foreach" {
		t.Error("torch.optim defaults to foreach on CUDA from 2.0")
	}
	// Conv_v8.cpp is the default from 2.0 (pull request 91117); Conv_v7.cpp
	// empties the cache while the search workspace is held, Conv_v8.cpp
	// after freeing it; cuBLAS's workspace is PyTorch's from 2.0 (pull
	// request 86167); lazy loading from 1.13 (pull request 86509) where
	// the runtime is CUDA 11.7 or later.
	if old.CudnnConvAPI != "v7" || cur.CudnnConvAPI != "v8" || old.CudnnBenchmarkEmptyCache != "during_search" || cur.CudnnBenchmarkEmptyCache != "after_search" {
		t.Error("cuDNN convolution API and benchmark empty_cache by release")
	}
	if old.CublasWorkspaceInAllocator || !cur.CublasWorkspaceInAllocator {
		t.Error("the cuBLAS workspace goes through the caching allocator from 2.0")
	}
	if old.CudaModuleLoading != "lazy_from_cuda_11_7" || cur.CudaModuleLoading != "lazy" {
		t.Error("lazy module loading by release")
	}
	// cuDNN 9 (2.11's wheels) transposes NCHW tensors for its tensor-core
	// engines; the earlier profiles keep the explicit-GEMM figure.
	for v, want := range map[string]string{"1.13": "explicit_gemm", "2.0": "explicit_gemm", "2.5": "explicit_gemm", "2.11": "nhwc_transform"} {
		if p, _ := Lookup(v); p.CudnnConvWorkspace != want {
			t.Errorf("%s: cudnn_conv_workspace %q, want %q", v, p.CudnnConvWorkspace, want)
		}
	}
	// torch/utils/checkpoint.py: the non-reentrant recomputation's early
	// stop, and its unpack hook's dropping the frame's hold, came with the
	// rewrite of 2.1 (pull requests 90105, 96866)
	for v, want := range map[string]bool{"1.13": false, "2.0": false, "2.5": true, "2.11": true} {
		if p, _ := Lookup(v); p.CheckpointEarlyStop != want || p.CheckpointUnpackReleases != want {
			t.Errorf("%s: checkpoint_early_stop %v, checkpoint_unpack_releases %v, want %v", v, p.CheckpointEarlyStop, p.CheckpointUnpackReleases, want)
		}
	}
	// CublasHandlePool.cpp: 4096 KiB × 8 on Hopper, :4096:2:16:8 elsewhere.
	if cur.CublasWorkspace(9) != 33554432 || cur.CublasWorkspace(8) != 8519680 {
		t.Errorf("cuBLAS workspace: %d on sm90, %d on sm80", cur.CublasWorkspace(9), cur.CublasWorkspace(8))
	}
	// cuBLASLt: a transient 1 MiB around each Lt GEMM in 2.0's
	// CUDABlas.cpp; a kept 1 MiB per thread handle in 2.11's
	// CublasHandlePool.cpp (CUBLASLT_WORKSPACE_SIZE's 1024 KiB default),
	// measured in the H200 snapshots; none of its own in 2.5's profile.
	for _, c := range []struct {
		v                   string
		transient, persists int64
	}{{"2.0", 1 << 20, 0}, {"2.5", 0, 0}, {"2.11", 0, 1 << 20}} {
		p, _ := Lookup(c.v)
		if p.CublasLtWorkspaceTransientBytes != c.transient || p.CublasLtWorkspaceBytes != c.persists {
			t.Errorf("%s: cuBLASLt workspace %d transient, %d kept; want %d, %d", c.v, p.CublasLtWorkspaceTransientBytes, p.CublasLtWorkspaceBytes, c.transient, c.persists)
		}
	}
}

// The kernels a step loads, in 2.11's figures (222 MiB for every step,
// 18 MiB for cuDNN's convolutions, 16 MiB for a fused attention kernel):
// the measured steps of testdata/measured/h200-torch2.11.json past the
// 518 MiB context, MLP 740, ResNet-18 758 (740 + 18), GPT-2 under half
// precision 758 (742 + 16, cuDNN attention), ViT-B/16 758 in float32
// (convolutions, memory-efficient attention) and under autocast
// (convolutions and cuDNN attention): cuDNN attention beside cuDNN's
// convolutions adds nothing.
func TestLazyModulesBytes(t *testing.T) {
	m := &LazyModules{Step: 222 << 20, Cudnn: 18 << 20, FusedAttention: 16 << 20}
	for _, c := range []struct {
		convs, fused, cudnnAttn bool
		want                    int64
	}{
		{false, false, false, 222 << 20},
		{true, false, false, 240 << 20},
		{false, true, true, 238 << 20},
		{false, true, false, 238 << 20},
		{true, true, true, 240 << 20},
		{true, true, false, 256 << 20},
	} {
		if got := m.Bytes(c.convs, c.fused, c.cudnnAttn); got != c.want {
			t.Errorf("convs %v, fused %v, cuDNN attention %v: %d, want %d", c.convs, c.fused, c.cudnnAttn, got, c.want)
		}
	}
	if (*LazyModules)(nil).Bytes(true, true, true) != 0 {
		t.Error("nil: want 0")
	}
}
