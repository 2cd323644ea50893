package train

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// convNet: conv1 3×3 padded on the batch (no input gradient), conv2 3×3
// stride 2 padded, conv3 1×1, then the head.
func convNet(t *testing.T, n, hw, c int64) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("t")
	x := b.Input("x", graph.Shape{n, 3, hw, hw}, graph.F32)
	y := b.Target("y", graph.Shape{n}, graph.I64)
	h := b.Conv2d("conv1", x, c, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}})
	h = b.Conv2d("conv2", h, 2*c, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}})
	h = b.Conv2d("conv3", h, 2*c, graph.Conv2dOpts{Kernel: [2]int64{1, 1}})
	out := b.Linear("head", b.Flatten("flatten", h, 1), 10, true)
	b.CrossEntropy("loss", out, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// convEvents lists the convolutions' workspace allocations and frees and
// the empty_cache calls, in trace order, as "site size" strings.
func convEvents(tr *trace.Trace) []string {
	var out []string
	for i := 0; i < tr.Len(); i++ {
		e := tr.At(i)
		switch {
		case e.Action == trace.EmptyCache:
			out = append(out, "empty_cache")
		case e.Category != trace.Workspace || !strings.HasPrefix(tr.SiteName(e.Site), "conv"):
		case e.Action == trace.Alloc:
			out = append(out, fmt.Sprintf("%s %d", tr.SiteName(e.Site), e.Size))
		case e.Action == trace.Free:
			out = append(out, "free")
		}
	}
	return out
}

// The workspace of each cuDNN kernel is the explicit-GEMM bound
// N·C·kh·kw·oh·ow elements (conv_cudnn.go), allocated after the kernel's
// output and freed when it returns. n=2, hw=8, c=4, float32:
//
//	conv1 [2,3,8,8] → [2,4,8,8]: 2·3·9·64·4 = 13824 bytes
//	conv2 [2,4,8,8] → [2,8,4,4]: 2·4·9·16·4 =  4608 bytes
//	conv3 1×1 stride 1: none
//
// Forward runs conv1, conv2; backward conv2's data and filter kernels,
// then conv1's filter kernel only (its input, the batch, needs no
// gradient).
func TestCudnnWorkspaceHeuristic(t *testing.T) {
	g := convNet(t, 2, 8, 4)
	tr, sum, err := Simulate(g, Setup{Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"conv1 13824", "free", "conv2 4608", "free", "conv2 4608", "free", "conv2 4608", "free", "conv1 13824", "free"}
	if got := convEvents(tr); !slices.Equal(got, want) {
		t.Errorf("events %v\nwant %v", got, want)
	}
	if sum.ConvWorkspaceBytes != 13824 || sum.CudnnSearches != 0 {
		t.Errorf("largest workspace %d, searches %d; want 13824, 0", sum.ConvWorkspaceBytes, sum.CudnnSearches)
	}
	// Each workspace falls back under its benchmark-cache entry: the
	// forward, data and filter kernels of one convolution are entries of
	// their own; a second step uses the entries of the first. The
	// entries are numbered from 1 in order of first use: conv1 fwd 1,
	// conv2 fwd 2, conv3 fwd 3, conv3 data 4, conv3 filter 5 (the 1×1
	// kernels go to cuDNN too, with no workspace to allocate), conv2 data
	// 6, conv2 filter 7, conv1 filter 8.
	tr, _, err = Simulate(g, Setup{Profile: mustProfile(t, "2.5"), Steps: 2, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []int32
	for i := 0; i < tr.Len(); i++ {
		if e := tr.At(i); e.Action == trace.Alloc && e.Category == trace.Workspace && strings.HasPrefix(tr.SiteName(e.Site), "conv") {
			keys = append(keys, e.Fallback)
		}
	}
	if want := []int32{1, 2, 6, 7, 8, 1, 2, 6, 7, 8}; !slices.Equal(keys, want) {
		t.Errorf("fallback keys %v, want %v", keys, want)
	}
	// The CPU runs no cuDNN.
	tr, _, err = Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	if got := convEvents(tr); len(got) != 0 {
		t.Errorf("CPU: %v", got)
	}
}

// With torch.backends.cudnn.benchmark each of the eight kernel
// configurations (conv1 fwd, conv2 fwd, conv3 fwd, conv3 data, conv3
// filter, conv2 data, conv2 filter, conv1 filter) is searched once, in the
// first step only; conv3's (1×1) searches allocate nothing. Where the search
// empties the cache is the release's: Conv_v7.cpp while the search
// workspace is held (1.13), Conv_v8.cpp after freeing it (2.5, 2.11), and
// not at all where 2.0's source was not read (2.0). From 2.11 the search
// takes the explicit-GEMM figure, 13824 bytes for conv1, and the kernel
// its NHWC copies: x 2·3·64·4 = 1536, y 2·4·64·4 = 2048, w 4·3·9·4 =
// 432, 4016 bytes; conv3's 1×1 kernels and searches then copy x and y
// too, so all eight kernels allocate.
func TestCudnnBenchmarkSearch(t *testing.T) {
	g := convNet(t, 2, 8, 4)
	for _, c := range []struct {
		prof    string
		first   []string // conv1's forward in step 1
		kernels int      // kernels with a workspace
	}{
		{"1.13", []string{"conv1 13824", "empty_cache", "free", "conv1 13824", "free"}, 5},
		{"2.0", []string{"conv1 13824", "free", "conv1 13824", "free"}, 5},
		{"2.5", []string{"conv1 13824", "free", "empty_cache", "conv1 13824", "free"}, 5},
		{"2.11", []string{"conv1 13824", "free", "empty_cache", "conv1 4016", "free"}, 8},
	} {
		tr, sum, err := Simulate(g, Setup{Profile: mustProfile(t, c.prof), Steps: 2, CudnnBenchmark: true, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		got := convEvents(tr)
		if !slices.Equal(got[:len(c.first)], c.first) {
			t.Errorf("%s: step 1 begins %v, want %v", c.prof, got[:len(c.first)], c.first)
		}
		if sum.CudnnSearches != 8 {
			t.Errorf("%s: %d searches, want 8", c.prof, sum.CudnnSearches)
		}
		empties := 0
		for _, s := range got {
			if s == "empty_cache" {
				empties++
			}
		}
		if want := map[string]int{"1.13": 8, "2.0": 0, "2.5": 8, "2.11": 8}[c.prof]; empties != want {
			t.Errorf("%s: %d empty_cache calls, want %d", c.prof, empties, want)
		}
		// Step 1: the kernels with a workspace and a search each (two
		// allocations), step 2: those kernels alone.
		allocs := 0
		for _, s := range got {
			if strings.HasPrefix(s, "conv") {
				allocs++
			}
		}
		if want := c.kernels*2 + c.kernels; allocs != want {
			t.Errorf("%s: %d workspace allocations, want %d", c.prof, allocs, want)
		}
	}
}

// Convolution.cpp use_cudnn_depthwise: a float32 depthwise convolution in
// NCHW runs the native kernel (no workspace), a float16 one goes to
// cuDNN; a 1×1 stride-1 kernel unfolds nothing. Up to 2.5 the workspace
// is the explicit-GEMM bound N·C·kh·kw·oh·ow elements, for the kernel and
// the benchmark search alike.
func TestConvWorkspaceBound(t *testing.T) {
	k3 := graph.Attr{Kernel: [2]int64{3, 3}, Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Groups: 1}
	dw := k3
	dw.Groups = 16
	dwCL := dw
	dwCL.ChannelsLast = true
	k1 := graph.Attr{Kernel: [2]int64{1, 1}, Stride: [2]int64{1, 1}, Groups: 1}
	k1s2 := graph.Attr{Kernel: [2]int64{1, 1}, Stride: [2]int64{2, 2}, Groups: 1}
	in, out := graph.Shape{4, 16, 10, 10}, graph.Shape{4, 16, 10, 10}
	half := graph.Shape{4, 16, 5, 5}
	s := &Setup{Profile: mustProfile(t, "2.5"), ComputeMajor: 9}
	for _, c := range []struct {
		name  string
		a     graph.Attr
		out   graph.Shape
		dt    graph.DType
		want  int64
		cudnn bool
	}{
		{"3x3", k3, out, graph.F32, 4 * 16 * 9 * 100 * 4, true},
		{"3x3 half", k3, out, graph.F16, 4 * 16 * 9 * 100 * 2, true},
		{"depthwise f32", dw, out, graph.F32, 0, false},
		{"depthwise bf16", dw, out, graph.BF16, 0, false},
		{"depthwise f16", dw, out, graph.F16, 4 * 16 * 9 * 100 * 2, true},
		{"depthwise channels-last", dwCL, out, graph.F32, 4 * 16 * 9 * 100 * 4, true},
		{"1x1", k1, out, graph.F32, 0, true},
		{"1x1 stride 2", k1s2, half, graph.F32, 4 * 16 * 25 * 4, true},
	} {
		ws := convWorkspace(s, in, c.out, c.a, c.dt)
		if ws.kernel != c.want || ws.search != c.want || ws.cudnn != c.cudnn || ws.nhwc {
			t.Errorf("%s: %+v; want %d, cuDNN %v", c.name, ws, c.want, c.cudnn)
		}
	}
}

// From 2.11 (cuDNN 9) the kernel's workspace is the tensor cores' NHWC
// copies of the input, the output and, unless 1×1, the weight; the
// benchmark search takes the larger of that and the explicit-GEMM
// figure. Where the tensor cores do not run (float32 on Turing, or with
// allow_tf32 off) the explicit-GEMM figure stands; channels-last tensors
// need no copy. Input [4,16,10,10], float32 unless said:
//
//	3×3, 16→16:        x 6400·4 + y 6400·4 + w 16·16·9·4 = 60416
//	                   explicit GEMM 4·16·9·100·4 = 230400
//	3×3 bfloat16:      (6400 + 6400 + 2304)·2 = 30208
//	3×3 stride 2 →32:  x 25600 + y 4·32·5·5·4 12800 + w 32·16·9·4 18432 = 56832
//	                   explicit GEMM 4·16·9·25·4 = 57600
//	3×3 groups 4:      w 16·4·9·4 = 2304: 25600+25600+2304 = 53504
//	1×1 stride 2 →32:  x 25600 + y 12800 (no weight copy) = 38400,
//	                   explicit GEMM 4·16·25·4 = 6400
//	1×1 stride 1:      x 25600 + y 25600 = 51200, explicit GEMM none
func TestConvWorkspaceNHWC(t *testing.T) {
	k3 := graph.Attr{Kernel: [2]int64{3, 3}, Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Groups: 1}
	k3s2 := graph.Attr{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}, Groups: 1}
	g4 := k3
	g4.Groups = 4
	cl := k3
	cl.ChannelsLast = true
	k1 := graph.Attr{Kernel: [2]int64{1, 1}, Stride: [2]int64{1, 1}, Groups: 1}
	k1s2 := graph.Attr{Kernel: [2]int64{1, 1}, Stride: [2]int64{2, 2}, Groups: 1}
	in := graph.Shape{4, 16, 10, 10}
	same, down := graph.Shape{4, 16, 10, 10}, graph.Shape{4, 32, 5, 5}
	p := mustProfile(t, "2.11")
	noTF32 := *p
	noTF32.CudnnAllowTF32 = false
	for _, c := range []struct {
		name           string
		prof           *profile.Profile
		major          int
		channelsLast   bool
		a              graph.Attr
		out            graph.Shape
		dt             graph.DType
		kernel, search int64
		nhwc           bool // the kernel's figure is the NHWC copies
	}{
		{"3x3", p, 9, false, k3, same, graph.F32, 60416, 230400, true},
		{"3x3 bf16", p, 9, false, k3, same, graph.BF16, 30208, 115200, true},
		{"3x3 stride 2", p, 9, false, k3s2, down, graph.F32, 56832, 57600, true},
		{"3x3 groups 4", p, 9, false, g4, same, graph.F32, 53504, 230400, true},
		{"1x1 stride 2", p, 9, false, k1s2, down, graph.F32, 38400, 38400, true},
		{"1x1", p, 9, false, k1, same, graph.F32, 51200, 51200, true},
		{"3x3 channels-last input", p, 9, false, cl, same, graph.F32, 0, 230400, true},
		{"3x3 channels-last model", p, 9, true, k3, same, graph.F32, 0, 230400, true},
		{"3x3 f32 on Turing", p, 7, false, k3, same, graph.F32, 230400, 230400, false},
		{"3x3 f16 on Turing", p, 7, false, k3, same, graph.F16, 30208, 115200, true},
		{"3x3 bf16 on Turing", p, 7, false, k3, same, graph.BF16, 115200, 115200, false},
		{"3x3 f32 without TF32", &noTF32, 9, false, k3, same, graph.F32, 230400, 230400, false},
	} {
		s := &Setup{Profile: c.prof, ComputeMajor: c.major, ChannelsLast: c.channelsLast}
		ws := convWorkspace(s, in, c.out, c.a, c.dt)
		if ws.kernel != c.kernel || ws.search != c.search || !ws.cudnn || ws.nhwc != c.nhwc {
			t.Errorf("%s: %+v; want kernel %d, search %d, NHWC %v", c.name, ws, c.kernel, c.search, c.nhwc)
		}
	}
}

// The cuBLAS workspace (CublasHandlePool.cpp): from 2.0 one per thread
// that runs a GEMM from the caching allocator, at its first GEMM; before,
// cuBLAS's own pool outside it. On compute capability 8 the size is
// :4096:2:16:8 = 8519680 bytes, or what CUBLAS_WORKSPACE_CONFIG says.
// 2.0's cuBLASLt adds 1 MiB (CUDABlas.cpp's default 1024 KiB) around the
// head's addmm with its bias, the one Lt call here; 2.5's shares the
// cuBLAS workspace.
func TestCublasWorkspacePlacement(t *testing.T) {
	g := convNet(t, 2, 8, 4)
	for _, c := range []struct {
		prof, config         string
		inTrace, library, lt int64
	}{
		{"1.13", "", 0, 2 * 8519680, 0},
		{"2.0", "", 2 * 8519680, 0, 1 << 20},
		{"2.5", "", 2 * 8519680, 0, 0},
		{"2.5", ":16:8", 2 * 16 * 1024 * 8, 0, 0},
	} {
		tr, sum, err := Simulate(g, Setup{Profile: mustProfile(t, c.prof), Steps: 1, ComputeMajor: 8, CublasWorkspaceConfig: c.config, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for i := 0; i < tr.Len(); i++ {
			if e := tr.At(i); e.Action == trace.Alloc && e.Category == trace.Workspace && !strings.HasPrefix(tr.SiteName(e.Site), "conv") {
				got += e.Size
			}
		}
		if got != c.inTrace+c.lt || sum.LibraryBytes != c.library || sum.WorkspaceBytes != c.inTrace+c.library {
			t.Errorf("%s %q: %d in the allocator, %d outside, %d in all; want %d, %d", c.prof, c.config, got, sum.LibraryBytes, sum.WorkspaceBytes, c.inTrace, c.library)
		}
	}
}
