package train

import (
	"fmt"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// A 2-block MLP (784 → 12,288 → 12,288 → 10) in bfloat16 on 2 GPUs, built
// by FSDP unit by unit (block 0, block 1, the root). Bytes of the
// parameters, in bfloat16:
//
//	block 0: weight 12,288·784·2 = 19,267,584, bias 24,576
//	block 1: weight 12,288²·2 = 301,989,888 (288 MiB), bias 24,576
//	root:    head 10·12,288·2 = 245,760, bias 20
//
// Each unit: its parameters moved (or materialized) one by one; under
// sync, the broadcast buckets of 250 MiB (262,144,000 bytes), a bucket
// closing once it reaches that size and flattened into a new tensor when
// it has more than one: block 0 and the root one bucket each of weight
// and bias (19,292,160 and 245,780 bytes), block 1's weight a bucket of
// its own (≥ 250 MiB), its bias another, both views, nothing allocated;
// then the unsharded flat parameter (the sum) and this rank's shard,
// ceil(n/2) of each parameter: (4,816,896 + 6,144)·2 = 9,646,080,
// (75,497,472 + 6,144)·2 = 151,007,232 and (61,440 + 5)·2 = 122,890;
// then the flat parameter, the moved parameters (last first) and the
// buckets are freed.
func TestFSDPLoadEvents(t *testing.T) {
	g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 12_288})
	if err != nil {
		t.Fatal(err)
	}
	unit := func(params []int64, buckets []int64, flat, shard int64) []string {
		var ev []string
		for _, b := range params {
			ev = append(ev, fmt.Sprint("alloc ", b))
		}
		for _, b := range buckets {
			ev = append(ev, fmt.Sprint("alloc ", b))
		}
		ev = append(ev, fmt.Sprint("alloc ", flat), fmt.Sprint("alloc ", shard), fmt.Sprint("free ", flat))
		for i := len(params) - 1; i >= 0; i-- {
			ev = append(ev, fmt.Sprint("free ", params[i]))
		}
		for _, b := range buckets {
			ev = append(ev, fmt.Sprint("free ", b))
		}
		return ev
	}
	for _, c := range []struct {
		load Load
		want [][]string
	}{
		{LoadSync, [][]string{
			unit([]int64{19_267_584, 24_576}, []int64{19_292_160}, 19_292_160, 9_646_080),
			unit([]int64{301_989_888, 24_576}, nil, 302_014_464, 151_007_232),
			unit([]int64{245_760, 20}, []int64{245_780}, 245_780, 122_890),
		}},
		{LoadMeta, [][]string{
			unit([]int64{19_267_584, 24_576}, nil, 19_292_160, 9_646_080),
			unit([]int64{301_989_888, 24_576}, nil, 302_014_464, 151_007_232),
			unit([]int64{245_760, 20}, nil, 245_780, 122_890),
		}},
	} {
		sim, err := New(g, loadSetup(c.load))
		if err != nil {
			t.Fatal(err)
		}
		tr := sim.Trace()
		var want, got []string
		for _, u := range c.want {
			want = append(want, u...)
		}
		want = append(want, "reset_peaks")
		sizes := map[int64]int64{}
		for _, e := range tr.Events {
			switch e.Action {
			case trace.Alloc:
				sizes[e.ID] = e.Size
				got = append(got, fmt.Sprint("alloc ", e.Size))
			case trace.Free:
				got = append(got, fmt.Sprint("free ", sizes[e.ID]))
			default:
				got = append(got, e.Action.String())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("load %s: setup events\n got %v\nwant %v", c.load, got, want)
		}
	}
}

// TestFSDPLoadReserved replays TestFSDPLoadEvents' setup through the
// caching allocator: what is reserved when the peaks are reset.
//
// sync, block 0: the weight takes a 20 MiB segment (≥ 10 MiB: rounded
// up to 2 MiB), its 1.625 MiB rest split off; the bias a 2 MiB small
// segment; the bucket (18.4 MiB) and the flat parameter a new 20 MiB
// segment each; the shard (9.2 MiB, between 1 and 10 MiB) a new 20 MiB
// one: 2 + 4·20 = 82 MiB. Block 1: the weight (288 MiB), the flat
// parameter (302,014,464 rounded up to 2 MiB: 290 MiB) and the shard
// (151,007,232: 146 MiB) each need a new segment, none of the cached 20
// MiB blocks being large enough: 82 + 724 = 806 MiB. The root's blocks
// are all ≤ 1 MiB and fit the small segment: 806 MiB.
//
// meta: no bucket, so block 0 makes three 20 MiB segments: 2 + 60 + 724 =
// 786 MiB. Allocated at the reset is the three shards, rounded to 512
// bytes: 9,646,080 + 151,007,232 + 123,392 = 160,776,704.
func TestFSDPLoadReserved(t *testing.T) {
	g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 12_288})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		load               Load
		reserved, allocked int64
	}{
		{LoadSync, 806 << 20, 160_776_704},
		{LoadMeta, 786 << 20, 160_776_704},
	} {
		sim, err := New(g, loadSetup(c.load))
		if err != nil {
			t.Fatal(err)
		}
		tl, err := alloc.Replay(sim.Trace(), alloc.Config{}, alloc.Device{}, alloc.ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tl.PeakReserved != c.reserved || tl.PeakAllocated != c.allocked {
			t.Errorf("load %s: peaks after the reset %d allocated, %d reserved; want %d, %d",
				c.load, tl.PeakAllocated, tl.PeakReserved, c.allocked, c.reserved)
		}
	}
}

func loadSetup(l Load) Setup {
	prof, _ := profile.Lookup("")
	return Setup{Profile: prof, Steps: 1, Precision: TrueBF16, Optimizer: Optimizer{Kind: Adam, Impl: Foreach},
		Parallel: Parallel{Strategy: FSDP, GPUs: 2, Load: l}}
}

// TestFSDPLoadLoRA: under PEFT's wrap policy each adapter weight is a
// unit of its own, built before its block (children first). The MLP of
// TestFSDPWrapGradients (784 → 64 → 64 → 10, LoRA r = 2 on both blocks)
// in bfloat16: block 0's lora_A (2·784·2 = 3,136 bytes) and lora_B
// (64·2·2 = 256 bytes) are each moved, flattened (one tensor: a view for
// the broadcast, a copy for the flat parameter) and sharded (1,568 and
// 128 bytes) before block 0's frozen weight and bias (100,352 + 128 bytes,
// one bucket of 100,480).
func TestFSDPLoadLoRA(t *testing.T) {
	a := &graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}}
	g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 64, Adapters: a})
	if err != nil {
		t.Fatal(err)
	}
	s := loadSetup(LoadSync)
	s.Parallel.Wrap = WrapLoRA
	sim, err := New(g, s)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range sim.Trace().Events {
		if e.Action == trace.Alloc && len(got) < 11 {
			got = append(got, e.Size)
		}
	}
	want := []int64{3_136, 3_136, 1_568, 256, 256, 128, 100_352, 128, 100_480, 100_480, 50_240}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("first allocations %v, want %v", got, want)
	}
}

func TestFSDPLoadRefused(t *testing.T) {
	for _, c := range []struct {
		p    Parallel
		want string
	}{
		{Parallel{Strategy: FSDP2, GPUs: 2, Load: LoadSync}, "strategy fsdp"},
		{Parallel{Strategy: DDP, GPUs: 2, Load: LoadMeta}, "strategy fsdp"},
		{Parallel{Strategy: FSDP, GPUs: 1, Load: LoadSync}, "more than one GPU"},
		{Parallel{Strategy: FSDP, GPUs: 2, Sharding: NoShard, Load: LoadSync}, "more than one GPU"},
		{Parallel{Strategy: FSDP, GPUs: 2, Offload: true, Load: LoadSync}, "offload"},
		{Parallel{Strategy: FSDP, GPUs: 2, Load: "disk"}, "unknown"},
	} {
		_, err := c.p.normalize()
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one that says %q", c.p, err, c.want)
		}
	}
}
