package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// attnGraph: q, k, v from three Linear layers on x [B, L, H·D], viewed as
// [B, H, L, D]; attention; merged back and classified per token. The merge
// copies the output of the math and eager paths, laid out [B, H, L, D];
// CUDA's flash and efficient kernels lay theirs out [B, L, H, D] (a query
// transposed from [B, L, H, D]), so there it is a view.
func attnGraph(t *testing.T, b, l, h, d int64) *graph.Graph {
	bl := graph.NewBuilder("attn")
	x := bl.Input("x", graph.Shape{b, l, h * d}, graph.F32)
	y := bl.Target("y", graph.Shape{b * l}, graph.I64)
	heads := func(name string) graph.TensorID {
		p := bl.Linear(name, x, h*d, true)
		p = bl.Reshape(name+".view", p, b, l, h, d)
		return bl.Transpose(name+".t", p, 1, 2)
	}
	q, k, v := heads("q"), heads("k"), heads("v")
	o := bl.Attention("attn", q, k, v, false, 0)
	o = bl.Transpose("o.t", o, 1, 2)
	o = bl.Reshape("o.merge", o, b*l, h*d)
	o = bl.Linear("head", o, 10, true)
	bl.CrossEntropy("loss", o, y)
	g, err := bl.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// What each kernel saves, pinned by differences worked out by hand, in
// bf16-true (2-byte q, k, v), B=2, H=4, L=S=40, D=16:
//
//	q, k, v, output         B·H·L·D·2   = 10,240 B each
//	flash logsumexp         B·H·L·4     =  1,280 B   [B, H, L] float32
//	efficient logsumexp     B·H·64·4    =  2,048 B   L rounded up to 32 (kAlignLSE)
//	probabilities, bf16     B·H·L·S·2   = 25,600 B
//
//	flash saves q, k, v, output, lse; the head's input is
//	  the output itself (the merge is a view)             = 42,240
//	efficient: the same with the padded lse               = 43,008 (+768)
//	eager (Hugging Face: scores scaled, not q): q, k,
//	  probabilities, v, and the merge's copy of the
//	  output that the head saves                          = 66,560 (+24,320)
//	SDPA math in PyTorch 2.5: upcasts to float32, saves
//	  q·√s and k·√s (20,480 each), float32 probabilities
//	  (51,200) and the float32 v (20,480), and the merge's
//	  copy (10,240)                                       = 122,880 (+80,640)
func TestAttentionKernels(t *testing.T) {
	g := attnGraph(t, 2, 40, 4, 16)
	saved := func(a Attention) int64 {
		_, sum, err := Simulate(g, Setup{Precision: TrueBF16, Attention: a, Steps: 1, Profile: mustProfile(t, "2.5")})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	flash := saved(AttentionFlash)
	for _, c := range []struct {
		a    Attention
		diff int64
	}{{AttentionEfficient, 768}, {AttentionEager, 24320}, {AttentionMath, 80640}} {
		if got := saved(c.a) - flash; got != c.diff {
			t.Errorf("%s saves %d bytes more than flash, want %d", c.a, got, c.diff)
		}
	}
	// auto picks flash for bf16 with a head dim of 16 on sm90.
	if got := saved(AttentionAuto); got != flash {
		t.Errorf("auto saved %d, flash %d", got, flash)
	}
}

// auto follows sdp_utils.cpp's order, flash, memory-efficient, math, by
// their checks on the GPU (ComputeMajor) and the dtype; the savings are
// TestAttentionKernels' (the same graph): flash 42,240 B, efficient
// +768, the math kernel of 2.5 +80,640. On sm75 flash is out
// (check_flash_attention_hardware_support), and so is efficient for
// bfloat16 (less_than_sm80_mem_efficient_dtypes is float16 and float32):
// math. float16 takes efficient there.
func TestAttentionAutoByGPU(t *testing.T) {
	g := attnGraph(t, 2, 40, 4, 16)
	saved := func(p Precision, a Attention, major int) int64 {
		_, sum, err := Simulate(g, Setup{Precision: p, Attention: a, Steps: 1, Profile: mustProfile(t, "2.5"), ComputeMajor: major})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	for _, c := range []struct {
		p     Precision
		major int
		want  Attention
		diff  int64 // over flash on sm90
	}{
		{TrueBF16, 9, AttentionFlash, 0},
		{TrueBF16, 8, AttentionFlash, 0},
		{TrueBF16, 7, AttentionMath, 80640},
		{True16, 7, AttentionEfficient, 768},
	} {
		flash := saved(c.p, AttentionFlash, 9)
		if got := saved(c.p, AttentionAuto, c.major) - flash; got != c.diff {
			t.Errorf("%s on sm%d0: auto saves %d bytes more than flash, want %d (the %s kernel)", c.p, c.major, got, c.diff, c.want)
		}
	}
}

// Checkpointing the attention core alone (the selective policy): the core
// keeps only q, k and v, which its Linear outputs already are, and drops
// what the kernel saves beyond them. Same sizes as TestAttentionKernels:
// eager drops the bf16 probabilities (25,600 B); flash drops its
// logsumexp (1,280 B) alone: its output, laid out [B, L, H, D], is what
// the merge views and the head saves.
func TestAttentionCheckpoint(t *testing.T) {
	g := attnGraph(t, 2, 40, 4, 16)
	for _, c := range []struct {
		a    Attention
		drop int64
	}{{AttentionEager, 25600}, {AttentionFlash, 1280}} {
		saved := func(ck Checkpoint) int64 {
			tr, sum, err := Simulate(g, Setup{Precision: TrueBF16, Attention: c.a, Checkpoint: ck, Steps: 2, Profile: mustProfile(t, "2.5")})
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
			return sum.ActivationsBytes
		}
		if got := saved(Checkpoint{}) - saved(Checkpoint{Attention: true}); got != c.drop {
			t.Errorf("%s: checkpointing the core saves %d bytes less, want %d", c.a, got, c.drop)
		}
	}
}

// SDPA on the CPU, float32, B=2, H=4, L=S=40, D=16, worked by hand:
//
//	q, k, v, output, a copy   B·H·L·D·4 = 20,480 B each
//	probabilities             B·H·L·S·4 = 51,200 B
//	logsumexp                 B·H·L·4   =  1,280 B   [B, H, L] float32
//
// PyTorch 2.5 runs _scaled_dot_product_flash_attention_for_cpu (dropout
// 0): q, k, v, output and logsumexp = 83,200 B; with the query laid out
// [B, L, H, D] the output is too, and o.transpose(1, 2).contiguous() is
// the output itself, which the next Linear saves. With a query laid out
// [B, H, L, D] the .contiguous() copies, and the Linear saves the copy
// (+20,480). Releases before the CPU flash kernel run the math path: q
// scaled into a copy, k, the probabilities, v, and the copy the Linear
// saves = 133,120 B, +49,920 over flash.
func TestAttentionCPUFlash(t *testing.T) {
	const b, l, h, d = 2, 40, 4, 16
	saved := func(version string, queryTransposed bool) int64 {
		layout := graph.QueryBHLD
		if queryTransposed {
			layout = graph.QueryBLHD
		}
		bl := graph.NewBuilder("attn")
		x := bl.Input("x", graph.Shape{b, l, h * d}, graph.F32)
		y := bl.Target("y", graph.Shape{b * l}, graph.I64)
		heads := func(name string) graph.TensorID {
			p := bl.Linear(name, x, h*d, true)
			if !queryTransposed {
				return bl.Reshape(name+".view", p, b, h, l, d)
			}
			p = bl.Reshape(name+".view", p, b, l, h, d)
			return bl.Transpose(name+".t", p, 1, 2)
		}
		q, k, v := heads("q"), heads("k"), heads("v")
		o := bl.AttentionLayout("attn", q, k, v, true, 0, layout)
		o = bl.Transpose("o.t", o, 1, 2)
		o = bl.Contiguous("o.contiguous", o)
		o = bl.Reshape("o.merge", o, b*l, h*d)
		o = bl.Linear("head", o, 10, true)
		bl.CrossEntropy("loss", o, y)
		g, err := bl.Graph()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{CPU: true, Steps: 1, Profile: mustProfile(t, version)})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	flash := saved("2.5", true)
	if got := saved("2.5", false) - flash; got != 20480 {
		t.Errorf("2.5, query laid out [B, H, L, D]: %d bytes more than with [B, L, H, D], want 20,480 (the output's copy)", got)
	}
	if got := saved("2.0", true) - flash; got != 49920 {
		t.Errorf("2.0's math path saves %d bytes more than 2.5's CPU flash kernel, want 49,920", got)
	}
}

// inOrder: a view reads a contiguous [L, B, H, D] = [5, 2, 12, 64] in
// order when its dims are the memory's dims split or merged in order.
func TestInOrder(t *testing.T) {
	mem := []int64{5, 2, 12, 64}
	for _, c := range []struct {
		s    []int64
		want bool
	}{
		{[]int64{5, 2, 12, 64}, true}, // 2.x: attn_output.permute(2, 0, 1, 3)
		{[]int64{5, 24, 64}, true},    // 1.13: transpose(0, 1) of the [B*H, L, D] view
		{[]int64{10, 768}, true},
		{[]int64{5, 1, 2, 768}, true},
		{[]int64{2, 5, 12, 64}, false}, // [B, L, H, D]: B and L swapped
		{[]int64{2, 12, 5, 64}, false}, // the output as [B, H, L, D]
		{[]int64{5, 2, 768, 1, 2}, false},
	} {
		if got := inOrder(c.s, mem); got != c.want {
			t.Errorf("inOrder(%v, %v) = %v, want %v", c.s, mem, got, c.want)
		}
	}
}

// select_sdp_backend's order (aten/src/ATen/native/transformers/cuda/
// sdp_utils.cpp), each row worked from the source's checks: under 2.11
// (cuDNN 9.19 bundled, above check_prefer_cudnn_attention's 9.15.0) cuDNN
// attention comes first on compute capability 9.x and 10.x and takes
// float16/bfloat16 head dims that are multiples of 8 up to 128 (192 with
// a value head of 128 on sm90/sm100 from cuDNN 9.11), a key length other
// than 1, a query length other than 1 with dropout, batch and heads up to
// 65535; elsewhere, and in releases whose profile keeps flash first,
// flash, memory-efficient, math as before.
func TestAttentionPriorityOrder(t *testing.T) {
	p211, p25 := mustProfile(t, "2.11"), mustProfile(t, "2.5")
	// cuDNN 9.13 bundled: not above 91500, so flash stays first
	old := *p211
	old.CudnnVersion = 91300
	bf := func(d int64) sdpaCase {
		return sdpaCase{dt: graph.BF16, dqk: d, dv: d, b: 64, h: 12, lq: 197, lk: 197}
	}
	with := func(a sdpaCase, f func(*sdpaCase)) sdpaCase { f(&a); return a }
	for _, c := range []struct {
		name  string
		a     sdpaCase
		p     *profile.Profile
		major int
		want  Attention
	}{
		{"ViT-B/16 bf16 on an H200", bf(64), p211, 9, AttentionCudnn},
		{"sm100", bf(128), p211, 10, AttentionCudnn},
		{"float16 with dropout 0.1", with(bf(64), func(a *sdpaCase) { a.dt, a.p = graph.F16, 0.1 }), p211, 9, AttentionCudnn},
		{"A100: not preferred", bf(64), p211, 8, AttentionFlash},
		{"sm120: not preferred", bf(64), p211, 12, AttentionFlash},
		{"2.5 keeps flash first", bf(64), p25, 9, AttentionFlash},
		{"cuDNN 9.13 keeps flash first", bf(64), &old, 9, AttentionFlash},
		{"head dim 256: flash", bf(256), p211, 9, AttentionFlash},
		{"head dim 192, value 128", with(bf(192), func(a *sdpaCase) { a.dv = 128 }), p211, 9, AttentionCudnn},
		{"head dim 160: flash", bf(160), p211, 9, AttentionFlash},
		{"head dim 60: math", bf(60), p211, 9, AttentionMath},
		{"float32: efficient", with(bf(64), func(a *sdpaCase) { a.dt = graph.F32 }), p211, 9, AttentionEfficient},
		{"key length 1", with(bf(64), func(a *sdpaCase) { a.lk = 1 }), p211, 9, AttentionFlash},
		{"query length 1 with dropout", with(bf(64), func(a *sdpaCase) { a.lq, a.p = 1, 0.1 }), p211, 9, AttentionFlash},
		{"query length 1 without dropout", with(bf(64), func(a *sdpaCase) { a.lq = 1 }), p211, 9, AttentionCudnn},
		{"batch 65536", with(bf(64), func(a *sdpaCase) { a.b = 65536 }), p211, 9, AttentionFlash},
		// grouped-query attention handed to SDPA unrepeated:
		// check_batch_size_and_num_heads_dense lets flash and cuDNN
		// attention take it under enable_gqa, never memory-efficient
		{"grouped, enable_gqa, H200", with(bf(64), func(a *sdpaCase) { a.grouped, a.gqa = true, true }), p211, 9, AttentionCudnn},
		{"grouped, enable_gqa, A100", with(bf(64), func(a *sdpaCase) { a.grouped, a.gqa = true, true }), p211, 8, AttentionFlash},
		{"grouped without enable_gqa", with(bf(64), func(a *sdpaCase) { a.grouped = true }), p211, 8, AttentionMath},
		{"grouped, enable_gqa, float32", with(bf(64), func(a *sdpaCase) { a.grouped, a.gqa, a.dt = true, true, graph.F32 }), p211, 8, AttentionMath},
		{"grouped, enable_gqa, T4 float16", with(bf(64), func(a *sdpaCase) { a.grouped, a.gqa, a.dt = true, true, graph.F16 }), p211, 7, AttentionMath},
	} {
		if got := c.a.pick(c.p, c.major); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	// cuDNN 9.11 to 9.13 refuse dropout (can_use_cudnn_attention)
	if bf(64).cudnnOK(91200, 9) != true || with(bf(64), func(a *sdpaCase) { a.p = 0.1 }).cudnnOK(91200, 9) {
		t.Error("cuDNN 9.12: want no dropout only")
	}
}

// cuDNN attention, same graph as TestAttentionKernels (bf16, B=2, H=4,
// L=S=40, D=16) on sm90 under 2.11, by hand: the attention saves what
// flash saves (42,240 B) and the dropout seed and offset, 8 bytes each
// (_cudnn_attention_forward), 42,256 B; its forward takes a 256-byte
// workspace and frees it; its backward allocates dq, dk and dv (10,240 B
// each) and then a workspace of B·H·L·(D+1)·4 + 256 = 22,016 B
// (run_cudnn_SDP_bprop, sized as the H200's recording).
func TestCudnnAttention(t *testing.T) {
	g := attnGraph(t, 2, 40, 4, 16)
	tr, sum, err := Simulate(g, Setup{Precision: TrueBF16, Steps: 1, Profile: mustProfile(t, "2.11"), ComputeMajor: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sum.SavedByOp {
		if s.Op == "attn" && s.Bytes != 42256 {
			t.Errorf("the attention saves %d bytes, want 42,256", s.Bytes)
		}
	}
	if !sum.FusedAttention || !sum.CudnnAttention {
		t.Errorf("summary: fused %v, cuDNN %v", sum.FusedAttention, sum.CudnnAttention)
	}
	var fwd, bwd []int64
	for _, e := range tr.Events {
		if e.Action != trace.Alloc || tr.SiteName(e.Site) != "attn" {
			continue
		}
		if e.Phase == trace.Backward {
			bwd = append(bwd, e.Size)
		} else {
			fwd = append(fwd, e.Size)
		}
	}
	if !slices.Contains(fwd, 256) {
		t.Errorf("forward allocates %v, want a 256-byte workspace among them", fwd)
	}
	if want := []int64{10240, 10240, 10240, 22016}; !slices.Equal(bwd, want) {
		t.Errorf("backward allocates %v, want %v", bwd, want)
	}
}

// Grouped-query attention on the math path: fewer key/value heads than
// query heads reach the math kernel either with enable_gqa (PyTorch 2.5's
// _scaled_dot_product_attention_math repeats key and value with
// repeat_interleave) or without it (at::matmul broadcasts the batch dims:
// the expanded key and value are reshaped into contiguous copies). Either
// way the products save key and value at the query's heads, as measured on
// 2.5.1's CPU (Falcon's multi-query attention, one key/value head; a call
// with enable_gqa and 2 of 4 heads): the node keeps what it keeps without
// grouping. B=2, L=S=8, H=4, D=16, float32, CPU (grouped-query attention
// runs the math path there):
//
//	q·√s (the scaled copy bmm saves)      B·H·L·D·4 = 4,096
//	k·√s at H heads, v at H heads         2 × 4,096
//	probabilities                         B·H·L·S·4 = 2,048
//	the merge's copy the head saves       B·L·H·D·4 = 4,096
//	the loss's log-softmax and total
//	weight (NllLossBackward0)             B·L·10·4 + 4 = 644
//	                                                  19,076
//
// (With as many key/value heads as query heads the CPU runs the flash
// kernel instead.)
func TestAttentionMathKVRepeat(t *testing.T) {
	const b, l, h, d = 2, 8, 4, 16
	saved := func(kv int64, gqa bool) int64 {
		bl := graph.NewBuilder("gqa")
		x := bl.Input("x", graph.Shape{b, l, h * d}, graph.F32)
		y := bl.Target("y", graph.Shape{b * l}, graph.I64)
		heads := func(name string, n int64) graph.TensorID {
			p := bl.Linear(name, x, n*d, true)
			p = bl.Reshape(name+".view", p, b, l, n, d)
			return bl.Transpose(name+".t", p, 1, 2)
		}
		q, k, v := heads("q", h), heads("k", kv), heads("v", kv)
		o := bl.AttentionGQA("attn", q, k, v, true, 0, graph.QueryBLHD, gqa)
		o = bl.Transpose("o.t", o, 1, 2)
		o = bl.Reshape("o.merge", o, b*l, h*d)
		o = bl.Linear("head", o, 10, true)
		bl.CrossEntropy("loss", o, y)
		g, err := bl.Graph()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{CPU: true, Steps: 1, Profile: mustProfile(t, "2.5")})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	for _, c := range []struct {
		kv  int64
		gqa bool
	}{{1, false}, {1, true}, {2, true}} {
		if got := saved(c.kv, c.gqa); got != 19076 {
			t.Errorf("%d key/value heads of %d, enable_gqa %v: saved %d bytes, want 19,076", c.kv, h, c.gqa, got)
		}
	}
}
