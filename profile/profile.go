package profile

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Profile is the set of version-dependent PyTorch facts the simulator
// consults.
type Profile struct {
	Version string `json:"version"`
	Notes   string `json:"notes"`
	// ZeroGradSetToNone: Optimizer.zero_grad() frees .grad (2.0+) rather
	// than zeroing it in place.
	ZeroGradSetToNone bool `json:"zero_grad_set_to_none"`
	// OptimizerDefaultImpl is what torch.optim picks when neither foreach
	// nor fused is given: "forloop" or "foreach".
	OptimizerDefaultImpl string `json:"optimizer_default_impl"`
	// AttentionDefault is the attention core nn.MultiheadAttention and
	// Hugging Face's default attention reach: "eager" (explicit bmm and
	// softmax as Python-level ops) or "sdpa" (scaled_dot_product_attention's
	// kernel choice).
	AttentionDefault string `json:"attention_default"`
	// EagerAttentionScaledCopies says which operands eager attention scales
	// into new tensors before the first matmul: "query" (torch 1.13's
	// multi_head_attention_forward divides q) or "none" (Hugging Face's
	// eager functions scale the scores instead).
	EagerAttentionScaledCopies string `json:"eager_attention_scaled_copies"`
	// MathAttentionScaledCopies says which operands the math path scales
	// into new tensors before the first matmul: "query" or "query_key".
	MathAttentionScaledCopies string `json:"math_attention_scaled_copies"`
	// MathAttentionUpcastsHalf: the math SDPA path computes in float32 for
	// half inputs.
	MathAttentionUpcastsHalf bool `json:"math_attention_upcasts_half"`
	// CPUFlashAttention: SDPA on the CPU runs the flash kernel
	// (_scaled_dot_product_flash_attention_for_cpu, select_sdp_backend_cpp
	// in aten/src/ATen/native/transformers/sdp_utils_cpp.cpp) when
	// dropout_p is 0, rather than the math path. Its backward node saves
	// query, key, value, output and the logsumexp [B, H, L] in the
	// accumulation dtype; the output is laid out as the query is.
	CPUFlashAttention bool `json:"cpu_flash_attention"`
	// CudnnAttentionFirst lists the compute-capability majors on which
	// SDPA's dispatcher tries cuDNN attention before flash:
	// priority_order (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp)
	// installs cudnn, flash, efficient, math when
	// check_prefer_cudnn_attention() holds, which in 2.11's source is
	// cudnn_version > 91500 && (major == 9 || major == 10), read against
	// the cuDNN the wheels bundle (CudnnVersion). Empty: flash first.
	CudnnAttentionFirst []int `json:"cudnn_attention_first,omitempty"`
	// CudnnVersion is the cuDNN the release's CUDA wheels bundle, as
	// cudnnGetVersion() reports it (91900 for 9.19.0): the runtime version
	// sdp_utils.cpp's cuDNN-attention checks read
	// (at::detail::getCUDAHooks().versionRuntimeCuDNN()). 0: unknown.
	CudnnVersion int `json:"cudnn_version,omitempty"`
	// CublasWorkspaceBytes maps a compute-capability major ("9") or
	// "default" to the cuBLAS workspace size allocated through the caching
	// allocator at a thread's first GEMM.
	CublasWorkspaceBytes map[string]int64 `json:"cublas_workspace_bytes"`
	// CublasWorkspaceInAllocator: PyTorch gives each cuBLAS handle a
	// workspace from the caching allocator (cublasSetWorkspace in
	// CublasHandlePool.cpp, pytorch pull request 86167, first in 2.0:
	// issue 95668 finds the 8519680 bytes in memory_allocated on 2.0 and
	// not on 1.13). Without it cuBLAS allocates the same default pool
	// itself, outside PyTorch's allocator: on the device, in nvidia-smi's
	// figure, but in neither memory_allocated nor memory_reserved.
	CublasWorkspaceInAllocator bool `json:"cublas_workspace_in_allocator"`
	// CublasWorkspacePerThread: one workspace per (thread, stream), so the
	// autograd device thread gets its own at its first GEMM in backward.
	CublasWorkspacePerThread bool `json:"cublas_workspace_per_thread"`
	// CublasLtWorkspaceTransientBytes is a per-GEMM workspace allocated and
	// freed around each cuBLASLt call (0 when Lt shares the cuBLAS one).
	CublasLtWorkspaceTransientBytes int64 `json:"cublaslt_workspace_transient_bytes"`
	// CublasLtWorkspaceBytes is a cuBLASLt workspace allocated through the
	// caching allocator at a thread handle's first Lt GEMM and kept
	// (getCUDABlasLtWorkspace in CublasHandlePool.cpp, one per handle and
	// stream from pytorch pull request 156495); 0 where Lt has none of
	// its own.
	CublasLtWorkspaceBytes int64 `json:"cublaslt_workspace_bytes"`
	// DropoutMaskDType is the dtype of the mask native_dropout saves on CUDA.
	DropoutMaskDType string `json:"dropout_mask_dtype"`
	// LinearFusedAnyRank: F.linear with a bias folds a contiguous input of
	// any rank into one addmm on a 2-D view (_flatten_nd_linear). Without
	// it only a contiguous 3-D input does (torch 1.13, 2.0), and a 4-D one
	// runs matmul then output.add_(bias): the bias gradient comes from an
	// AddBackward0 node of its own, which runs (and hands its gradient to
	// AccumulateGrad) before the matmul's backward.
	LinearFusedAnyRank bool `json:"linear_fused_any_rank"`
	// MHAPackedInProjection: F.multi_head_attention_forward's
	// _in_projection_packed (torch/nn/functional.py) turns a
	// self-attention's projection [L, B, 3E] into q, k and v with
	// proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2)
	// .squeeze(-2).contiguous() and returns proj[0], proj[1], proj[2]: one
	// [3, L, B, E] copy whose selects are contiguous views, all three kept
	// while the attention saves them. Torch 1.13 returns
	// linear(q, w, b).chunk(3, dim=-1) and copies each chunk on its own
	// (q.contiguous().view(...)).
	MHAPackedInProjection bool `json:"mha_packed_in_projection"`
	// MeanDimSavesSelf: MeanBackward1 keeps its whole input (1.13);
	// later autograd code saves only the input's sizes and element count.
	// adaptive_avg_pool2d to (1, 1) runs as this mean.
	MeanDimSavesSelf bool `json:"mean_dim_saves_self"`
	// BatchNormCPUStatsFirst: the CPU native_batch_norm computes the
	// batch statistics before it makes its output (1.13's batch_norm_cpu:
	// batch_norm_cpu_update_stats_template, then
	// batch_norm_cpu_transform_input_template's empty_like). PyTorch pull
	// request 88604 (November 2022, in 2.0: native_batch_norm.out for
	// CPU) makes the output first and hands it down; measured on 1.13 and
	// 2.5.1 with one batch norm at a time (profile_memory).
	BatchNormCPUStatsFirst bool `json:"batch_norm_cpu_stats_first"`
	// AdamForeachDenomCopy: _multi_tensor_adam makes denom =
	// _foreach_add(exp_avg_sq_sqrt, eps), a second set of parameter-sized
	// temporaries alive beside the square roots (torch 1.13 and 2.0);
	// later releases add eps in place.
	AdamForeachDenomCopy bool `json:"adam_foreach_denom_copy"`
	// InputBufferInPlace: when two gradients reach one tensor in
	// backward, InputBuffer::accumulate adds the second into the first in
	// place if nothing else holds the first (can_accumulate_inplace; a
	// view's base holds its storage, so a view is summed out of place:
	// train.accumulate); torch 1.13 always adds out of place
	// (old_var + var), measured with validation/step.py.
	InputBufferInPlace bool `json:"input_buffer_in_place"`
	// WrappedNumberUnhooked: SavedVariable's constructor
	// (torch/csrc/autograd/saved_variable.cpp) keeps a wrapped number
	// (the 0-d tensor a Python number becomes: the other of x * 0.5)
	// itself rather than handing it to the saved-tensor hooks ("Avoid
	// wrapped numbers from being leaked to the user"), so a
	// non-reentrant checkpoint's pack hook never sees it and its node
	// keeps it to backward. Torch 1.13 packs it like any tensor, and the
	// checkpoint lets it go (both measured on the CPU, 8 bytes a number).
	WrappedNumberUnhooked bool `json:"wrapped_number_unhooked"`
	// CheckpointEarlyStop: torch.utils.checkpoint(use_reentrant=False)
	// stops its recomputation at the last tensor the original forward
	// packed (torch/utils/checkpoint.py, _recomputation_hook's pack_hook
	// raises _StopRecomputationError once recomp_counter reaches
	// len(frame.weak_holders); _enable_checkpoint_early_stop is True by
	// default), so the ops after it never run again. The rewrite that
	// brought it (_checkpoint_without_reentrant_generator, _CheckpointFrame:
	// pytorch pull requests 90105 and 96866, merged in March 2023 after
	// 2.0's release branch) is first in 2.1; 1.13's (and 2.0's)
	// _checkpoint_without_reentrant reruns the whole function at the
	// first unpack (its unpack closure calls function(*args, **kwargs)
	// under inner_pack, which stores every tensor whose Holder is alive;
	// pytorch issue 81448). Measured on the CPU with 1.13 and 2.5.1
	// (train.TestRecomputeByRelease).
	CheckpointEarlyStop bool `json:"checkpoint_early_stop"`
	// CheckpointUnpackReleases: the non-reentrant checkpoint's unpack
	// hook of the same rewrite (2.1's _checkpoint_hook.unpack_hook) hands
	// the node the recomputed tensor and drops the frame's hold on it
	// (holder.handles[gid] = None; frame.recomputed is keyed weakly by
	// that handle), so the tensors a node unpacked go as its apply()
	// returns (train.applyReturns). 1.13's (and 2.0's) unpack returns
	// storage[x] from a WeakKeyDictionary keyed by the Holder that the
	// SavedVariable keeps until release_variables().
	CheckpointUnpackReleases bool `json:"checkpoint_unpack_releases"`
	// MatmulAllowTF32 is torch.backends.cuda.matmul.allow_tf32's default:
	// off since 1.12, so float32 matmuls run on the CUDA cores.
	// CudnnAllowTF32 is torch.backends.cudnn.allow_tf32's: on, so float32
	// convolutions run on the tensor cores in TF32. The step-time model
	// picks the peak rate by them.
	MatmulAllowTF32 bool `json:"matmul_allow_tf32"`
	CudnnAllowTF32  bool `json:"cudnn_allow_tf32"`
	// CudnnConvAPI is the cuDNN API convolutions go through: "v7"
	// (aten/src/ATen/native/cudnn/Conv_v7.cpp, torch 1.13) or "v8"
	// (Conv_v8.cpp, on by default from 2.0: pytorch pull request 91117;
	// TORCH_CUDNN_V8_API_DISABLED=1 opts out).
	CudnnConvAPI string `json:"cudnn_conv_api"`
	// CudnnBenchmarkEmptyCache says when torch.backends.cudnn.benchmark's
	// algorithm search empties the caching allocator's cache (see
	// train/conv_cudnn.go): "during_search" (Conv_v7.cpp findAlgorithms
	// calls emptyCache while its Workspace still holds the search
	// workspace, which therefore stays reserved), "after_search"
	// (Conv_v8.cpp run_single_conv calls emptyCache after
	// get_plans_from_find has freed it, when
	// _cudnn_get_conv_benchmark_empty_cache, on by default) or "none".
	CudnnBenchmarkEmptyCache string `json:"cudnn_benchmark_empty_cache"`
	// CudnnConvWorkspace is how large a cuDNN convolution kernel's
	// workspace is taken (train/conv_cudnn.go), the size the algorithm
	// cuDNN's heuristic ranks first asks for, which PyTorch allocates
	// as it is (Conv_v7.cpp allocate_workspace(perf.memory), Conv_v8.cpp
	// run_conv_plan: plan.getWorkspaceSize()):
	//   - "explicit_gemm": the unfolded input of the explicit-GEMM
	//     algorithm (CUDNN_CONVOLUTION_FWD_ALGO_GEMM), N·C·kh·kw·oh·ow
	//     elements, the figure the public corpus of torch 1.10 to 2.0
	//     runs was checked with (docs/accuracy.md §3.1);
	//   - "nhwc_transform": cuDNN 9 (the wheels of 2.11) ranks first an
	//     engine that runs on the tensor cores in NHWC and transposes the
	//     NCHW input, output and weight into its workspace (the cuDNN
	//     developer guide's "padding, folding, and NCHW-to-NHWC
	//     transformations to call the Tensor Core operations"): their
	//     bytes, as an H200 under 2.11 shows (testdata/measured).
	CudnnConvWorkspace string `json:"cudnn_conv_workspace"`
	// CudaModuleLoading is how the release's CUDA builds load kernels,
	// which sets the CUDA context's size (gpu.GPU.ContextSize assumes
	// lazy): "lazy" (every build's runtime is CUDA 11.7 or later, and
	// PyTorch sets CUDA_MODULE_LOADING=LAZY when the user has not, pull
	// request 86509) or "lazy_from_cuda_11_7" (1.13, also built for CUDA
	// 11.6, which loads every kernel at start-up).
	CudaModuleLoading string `json:"cuda_module_loading"`
	// LazyModules is the device memory of the kernels a training step
	// loads on their first launch under lazy module loading (the CUDA C
	// Programming Guide, "Lazy Loading": a module is loaded into device
	// memory when one of its kernels is first launched), outside
	// PyTorch's allocator: what the process holds outside the allocator
	// after the first step less what it held after torch.cuda.init.
	// Measured where a release has it; nil where not.
	LazyModules *LazyModules `json:"lazy_module_bytes,omitempty"`
	// AutocastCacheOffInInferenceMode: cached_cast does not cache under
	// torch.inference_mode() (pytorch pull request 165068, merged in
	// December 2025, after 2.9: it makes the cached copies with grad mode
	// on so that they serve no_grad and grad alike, and skips the cache
	// in inference mode). In the earlier releases can_try_cache asks only
	// the tensor (a float32 leaf that requires grad, not a view) and
	// cache_enabled, so a parameter made outside inference mode is cached
	// inside it as under no_grad (measured on 1.13 with
	// validation/autocast.py).
	AutocastCacheOffInInferenceMode bool `json:"autocast_cache_off_in_inference_mode"`
}

//go:embed profiles.json
var profilesJSON []byte

var profiles []Profile

func init() {
	ps, err := parse(profilesJSON)
	if err != nil {
		// The embedded data is part of the program; a test covers it.
		profiles = nil
		loadErr = err
		return
	}
	profiles = ps
}

var loadErr error

func parse(data []byte) ([]Profile, error) {
	var ps []Profile
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, fmt.Errorf("parsing embedded profiles.json: %w", err)
	}
	for _, p := range ps {
		if _, err := parseVersion(p.Version); err != nil {
			return nil, fmt.Errorf("profiles.json: %w", err)
		}
		switch p.OptimizerDefaultImpl {
		case "forloop", "foreach":
		default:
			return nil, fmt.Errorf("profiles.json: %s: optimizer_default_impl %q", p.Version, p.OptimizerDefaultImpl)
		}
		switch p.CudnnConvAPI {
		case "v7", "v8":
		default:
			return nil, fmt.Errorf("profiles.json: %s: cudnn_conv_api %q", p.Version, p.CudnnConvAPI)
		}
		switch p.CudaModuleLoading {
		case "lazy", "lazy_from_cuda_11_7":
		default:
			return nil, fmt.Errorf("profiles.json: %s: cuda_module_loading %q", p.Version, p.CudaModuleLoading)
		}
		switch p.CudnnBenchmarkEmptyCache {
		case "during_search", "after_search", "none":
		default:
			return nil, fmt.Errorf("profiles.json: %s: cudnn_benchmark_empty_cache %q", p.Version, p.CudnnBenchmarkEmptyCache)
		}
		switch p.CudnnConvWorkspace {
		case "explicit_gemm", "nhwc_transform":
		default:
			return nil, fmt.Errorf("profiles.json: %s: cudnn_conv_workspace %q", p.Version, p.CudnnConvWorkspace)
		}
		switch p.AttentionDefault {
		case "eager", "sdpa":
		default:
			return nil, fmt.Errorf("profiles.json: %s: attention_default %q", p.Version, p.AttentionDefault)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return less(ps[i].Version, ps[j].Version) })
	return ps, nil
}

func parseVersion(v string) ([2]int, error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return [2]int{}, fmt.Errorf("version %q: want MAJOR.MINOR", v)
	}
	var out [2]int
	for i := 0; i < 2; i++ {
		// Accept local suffixes such as "1.13.1+cu117" or "2.5.0a0".
		digits := strings.TrimRightFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' })
		if i == 1 {
			end := strings.IndexFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' })
			if end >= 0 {
				digits = parts[i][:end]
			}
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return [2]int{}, fmt.Errorf("version %q: want MAJOR.MINOR", v)
		}
		out[i] = n
	}
	return out, nil
}

func less(a, b string) bool {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	return va[0] < vb[0] || (va[0] == vb[0] && va[1] < vb[1])
}

// Default is the profile of the current PyTorch release (the newest).
func Default() *Profile {
	if len(profiles) == 0 {
		return nil
	}
	p := profiles[len(profiles)-1]
	return &p
}

// LazyModules is the bytes of kernel modules a training step loads: the
// kernels every step runs (PyTorch's own, cuBLAS's GEMMs), and on top
// those of cuDNN's convolutions and of the fused attention kernel (flash
// or cuDNN attention) where the step runs them.
type LazyModules struct {
	Step  int64 `json:"step"`
	Cudnn int64 `json:"cudnn"`
	// FusedAttention is measured where the fused kernel that ran was cuDNN
	// attention (GPT-2 under half precision on the H200, torch 2.11); no
	// release measured here ran flash on the GPU, so flash takes the same
	// figure.
	FusedAttention int64 `json:"fused_attention"`
}

// Bytes is what a step loads that runs cuDNN convolutions (convs) and a
// fused attention kernel (fused), cuDNN attention if cudnnAttn; nil loads
// nothing that is counted. A step that runs both cuDNN's convolutions and
// cuDNN attention loads the convolutions' figure alone: measured, ViT-B/16
// under autocast on the H200 (cuDNN convolutions and cuDNN attention)
// holds what it holds in float32 (cuDNN convolutions, memory-efficient
// attention), 758 MiB past the allocator in both.
func (m *LazyModules) Bytes(convs, fused, cudnnAttn bool) int64 {
	if m == nil {
		return 0
	}
	n := m.Step
	if convs {
		n += m.Cudnn
	}
	if fused && !(convs && cudnnAttn) {
		n += m.FusedAttention
	}
	return n
}

// Lookup returns the profile that applies to PyTorch version v ("1.13",
// "2.4.1", "2.5.0+cu124"): the newest profile not newer than v.
func Lookup(v string) (*Profile, error) {
	if loadErr != nil {
		return nil, loadErr
	}
	if v == "" || v == "current" || v == "latest" {
		return Default(), nil
	}
	want, err := parseVersion(v)
	if err != nil {
		return nil, fmt.Errorf("--torch: %w", err)
	}
	// A later minor release takes the newest profile's rules (the setup
	// line says "2.5+ rules"); a later major release is no release this
	// table knows: its allocator and autograd may differ in any rule.
	newest, _ := parseVersion(profiles[len(profiles)-1].Version)
	if want[0] > newest[0] {
		return nil, fmt.Errorf("no runtime profile for PyTorch %s: the known releases are %s and later %d.x releases (with %s's rules)",
			v, strings.Join(Versions(), ", "), newest[0], profiles[len(profiles)-1].Version)
	}
	var found *Profile
	for i := range profiles {
		pv, _ := parseVersion(profiles[i].Version)
		if pv[0] < want[0] || (pv[0] == want[0] && pv[1] <= want[1]) {
			p := profiles[i]
			found = &p
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no runtime profile for PyTorch %s; the oldest known is %s", v, profiles[0].Version)
	}
	return found, nil
}

// Versions lists the profile versions, oldest first.
func Versions() []string {
	vs := make([]string, len(profiles))
	for i, p := range profiles {
		vs[i] = p.Version
	}
	return vs
}

// CublasWorkspace is the workspace size for a GPU of compute capability
// major.
func (p *Profile) CublasWorkspace(major int) int64 {
	if n, ok := p.CublasWorkspaceBytes[strconv.Itoa(major)]; ok {
		return n
	}
	return p.CublasWorkspaceBytes["default"]
}
