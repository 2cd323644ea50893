package snapshot

import (
	"bytes"
	"encoding/hex"
	"testing"

	ogórek "github.com/kisielk/og-rek"
)

// cpythonGolden is pickle.dumps(d, protocol=4) by CPython 3.11 of the dict
// goldenValue builds (equal strings interned with sys.intern, so that they
// are one object as a snapshot's keys are):
//
//	fr = [{"filename": ".../torch/nn/modules/linear.py", "line": 116, "name": "forward"},
//	      {"filename": "/work/train.py", "line": 42, "name": "step"}]
//	empty = []
//	{"segments": [{..., "frames": fr, "blocks": [{..., "frames": fr}, {..., "frames": fr},
//	                                             {..., "frames": empty}]}],
//	 "device_traces": [[{"action": "segment_alloc", ..., "frames": fr},
//	                    {"action": "alloc", ..., "frames": fr},
//	                    {"action": "alloc", ..., "frames": empty}]],
//	 "allocator_settings": {...}}
//
// fr and empty are shared as in memory_snapshot.cpp, so the pickle refers
// to them with BINGET after their first use.
const cpythonGolden = "" +
	"800495cb030000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c076164647265" +
	"7373948a0600000000007f8c0a746f74616c5f73697a65944a000020008c0e616c6c6f63617465645f73697a65944d00" +
	"068c0b6163746976655f73697a65944d00068c0e7265717565737465645f73697a65944db0048c0673747265616d944b" +
	"008c0c7365676d656e745f74797065948c05736d616c6c948c0f7365676d656e745f706f6f6c5f6964944b004b008694" +
	"8c0d69735f657870616e6461626c6594898c066672616d6573945d94287d94288c0866696c656e616d65948c392f7573" +
	"722f6c69622f707974686f6e332f736974652d7061636b616765732f746f7263682f6e6e2f6d6f64756c65732f6c696e" +
	"6561722e7079948c046c696e65944b748c046e616d65948c07666f727761726494757d942868138c0e2f776f726b2f74" +
	"7261696e2e70799468154b2a68168c04737465709475658c06626c6f636b73945d94287d942868058a0600000000007f" +
	"8c0473697a65944d000468094de8038c057374617465948c106163746976655f616c6c6f63617465649468106811757d" +
	"942868058a0600040000007f681e4d000268094bc8681f682068106811757d942868058a0600060000007f681e4a00fa" +
	"1f0068094b00681f8c08696e6163746976659468105d94756575618c0d6465766963655f747261636573945d945d9428" +
	"7d94288c06616374696f6e948c0d7365676d656e745f616c6c6f63948c0461646472948a0600000000007f681e4a0000" +
	"2000680a4b008c0774696d655f7573948a070000bf1b62170668106811757d942868298c05616c6c6f6394682b8a0600" +
	"000000007f681e4de803680a4b00682c8a070100bf1b62170668106811757d94286829682e682b8a0600040000007f68" +
	"1e4bc8680a4b00682c8a070200bf1b621706681068247565618c12616c6c6f6361746f725f73657474696e6773947d94" +
	"288c175059544f5243485f435544415f414c4c4f435f434f4e46948c00948c0e6d61785f73706c69745f73697a65944a" +
	"ffffffff8c1c676172626167655f636f6c6c656374696f6e5f7468726573686f6c64944700000000000000008c136578" +
	"70616e6461626c655f7365676d656e747394898c1b70696e6e65645f6e756d5f72656769737465725f74687265616473" +
	"944b018c1a72656c656173655f6c6f636b5f6f6e5f637564616d616c6c6f6394898c1d70696e6e65645f7573655f6375" +
	"64615f686f73745f726567697374657294898c18726f756e6475705f706f776572325f6469766973696f6e73947d9428" +
	"8c0131944b008c0132944b008c0134944b007575752e"

func golden(t testing.TB) []byte {
	b, err := hex.DecodeString(cpythonGolden)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const addrA = 0x7f0000000000

var (
	frTorch = Frame{"/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 116, "forward"}
	frUser  = Frame{"/work/train.py", 42, "step"}
)

func goldenValue() any {
	fr := lst(
		dict(kv{"filename", frTorch.Filename}, kv{"line", frTorch.Line}, kv{"name", frTorch.Name}),
		dict(kv{"filename", frUser.Filename}, kv{"line", frUser.Line}, kv{"name", frUser.Name}),
	)
	empty := lst()
	return dict(
		kv{"segments", lst(dict(
			kv{"device", 0}, kv{"address", int64(addrA)}, kv{"total_size", 2097152},
			kv{"allocated_size", 1536}, kv{"active_size", 1536}, kv{"requested_size", 1200},
			kv{"stream", 0}, kv{"segment_type", "small"}, kv{"segment_pool_id", ogórek.Tuple{0, 0}},
			kv{"is_expandable", false}, kv{"frames", fr},
			kv{"blocks", lst(
				dict(kv{"address", int64(addrA)}, kv{"size", 1024}, kv{"requested_size", 1000}, kv{"state", "active_allocated"}, kv{"frames", fr}),
				dict(kv{"address", int64(addrA + 1024)}, kv{"size", 512}, kv{"requested_size", 200}, kv{"state", "active_allocated"}, kv{"frames", fr}),
				dict(kv{"address", int64(addrA + 1536)}, kv{"size", 2095616}, kv{"requested_size", 0}, kv{"state", "inactive"}, kv{"frames", empty}),
			)},
		))},
		kv{"device_traces", lst(lst(
			dict(kv{"action", "segment_alloc"}, kv{"addr", int64(addrA)}, kv{"size", 2097152}, kv{"stream", 0}, kv{"time_us", int64(1714560000000000)}, kv{"frames", fr}),
			dict(kv{"action", "alloc"}, kv{"addr", int64(addrA)}, kv{"size", 1000}, kv{"stream", 0}, kv{"time_us", int64(1714560000000001)}, kv{"frames", fr}),
			dict(kv{"action", "alloc"}, kv{"addr", int64(addrA + 1024)}, kv{"size", 200}, kv{"stream", 0}, kv{"time_us", int64(1714560000000002)}, kv{"frames", empty}),
		))},
		kv{"allocator_settings", dict(
			kv{"PYTORCH_CUDA_ALLOC_CONF", ""}, kv{"max_split_size", int64(-1)},
			kv{"garbage_collection_threshold", 0.0}, kv{"expandable_segments", false},
			kv{"pinned_num_register_threads", 1}, kv{"release_lock_on_cudamalloc", false},
			kv{"pinned_use_cuda_host_register", false},
			kv{"roundup_power2_divisions", dict(kv{"1", 0}, kv{"2", 0}, kv{"4", 0})},
		)},
	)
}

// Addresses of the richer fixture.
const (
	segA = 0x7f2a00000000 // large segment, 20 MiB
	segB = segA + 20<<20  // small segment, 2 MiB
	segC = 0x7f3b00000000 // device 1
	// stream1 is a cudaStream_t of a side stream, as an integer.
	stream1 = 94_371_234_816
)

// frameDict builds a frame as memory_snapshot.cpp does.
func frameDict(f Frame) *pyDict {
	return dict(kv{"name", f.Name}, kv{"filename", f.Filename}, kv{"line", f.Line})
}

var (
	frAlloc = Frame{"/work/model.py", 88, "forward"}
	frFree  = Frame{"/work/train.py", 120, "train_step"}
	frCpp   = Frame{"??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"}
	frCpp2  = Frame{"/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1200, "malloc"}
)

// fixture builds a snapshot with two segments on device 0, one on device
// 1, and traces with every action, in the key order of
// memory_snapshot.cpp ("frames" last in blocks and entries, before
// "blocks" in segments). manyFrames adds a stack of 1500 frames (two
// APPENDS batches) to one entry.
func fixture(manyFrames bool) any {
	torchFrames := lst(frameDict(frCpp), frameDict(frCpp2), frameDict(frTorch), frameDict(frAlloc))
	userFrames := lst(frameDict(frFree)) // a single frame: EMPTY_LIST MEMOIZE item APPEND
	cppOnly := lst(frameDict(frCpp), frameDict(frCpp2))
	empty := lst()
	long := lst()
	for i := 0; i < 1500; i++ {
		long.items = append(long.items, frameDict(Frame{"/work/deep.py", i, "recurse"}))
	}
	entryFrames := torchFrames
	if manyFrames {
		entryFrames = long
	}
	entry := func(action string, addr int64, size int, stream int64, t int64, frames any) *pyDict {
		return dict(kv{"action", action}, kv{"addr", addr}, kv{"size", size}, kv{"stream", stream}, kv{"time_us", t}, kv{"frames", frames})
	}
	block := func(addr int64, size, req int, state string, frames any) *pyDict {
		return dict(kv{"address", addr}, kv{"size", size}, kv{"requested_size", req}, kv{"state", state}, kv{"frames", frames})
	}
	segment := func(dev int, addr int64, total, alloc, req int, stream int64, typ string, frames any, blocks ...any) *pyDict {
		return dict(kv{"device", dev}, kv{"address", addr}, kv{"total_size", total}, kv{"allocated_size", alloc},
			kv{"active_size", alloc}, kv{"requested_size", req}, kv{"stream", stream}, kv{"segment_type", typ},
			kv{"segment_pool_id", ogórek.Tuple{0, 0}}, kv{"is_expandable", false}, kv{"frames", frames},
			kv{"blocks", lst(blocks...)})
	}
	const t0 = 1714560000000000
	return dict(
		kv{"segments", lst(
			segment(0, segA, 20<<20, 6<<20, 2000000+4194304, 0, "large", torchFrames,
				block(segA, 2<<20, 2000000, "active_allocated", torchFrames), // allocated before the trace
				block(segA+2<<20, 4<<20, 4194304, "active_allocated", userFrames),
				block(segA+6<<20, 14<<20, 0, "inactive", empty),
			),
			segment(0, segB, 2<<20, 512, 100, 0, "small", empty,
				block(segB, 512, 100, "active_allocated", cppOnly),
				block(segB+512, 2<<20-512, 0, "inactive", empty),
			),
			segment(1, segC, 2<<20, 1024, 1000, stream1, "small", empty,
				block(segC, 1024, 1000, "active_allocated", empty),
				block(segC+1024, 2<<20-1024, 0, "inactive", empty),
			),
		)},
		kv{"device_traces", lst(
			lst(
				entry("free_requested", segA+6<<20, 1048576, 0, t0, userFrames), // allocated before the trace
				entry("free_completed", segA+6<<20, 1048576, 0, t0+1, userFrames),
				entry("segment_alloc", segB, 2<<20, 0, t0+2, cppOnly),
				entry("alloc", segB, 100, 0, t0+3, cppOnly),
				entry("alloc", segA+2<<20, 4194304, 0, t0+4, entryFrames),
				entry("alloc", segB+512, 300, 0, t0+5, userFrames),
				entry("free_requested", segB+512, 300, 0, t0+6, userFrames),
				entry("free_completed", segB+512, 300, 0, t0+7, userFrames),
				entry("alloc", segB+512, 400, 0, t0+8, empty), // address reused
				entry("free_requested", segB+512, 400, 0, t0+9, empty),
				entry("free_completed", segB+512, 400, 0, t0+10, empty),
				dict(kv{"action", "oom"}, kv{"device_free", 1234}, kv{"size", 20 << 20}, kv{"stream", 0}, kv{"time_us", int64(t0 + 11)}, kv{"frames", torchFrames}),
				entry("snapshot", 0, 6<<20, 0, t0+12, empty),
			),
			lst(
				entry("segment_alloc", segC, 2<<20, stream1, t0+20, empty),
				entry("alloc", segC, 1000, stream1, t0+21, empty),
			),
		)},
		kv{"allocator_settings", dict(
			kv{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False,max_split_size_mb:128"},
			kv{"max_split_size", 128 << 20},
			kv{"garbage_collection_threshold", 0.8}, kv{"expandable_segments", false},
			kv{"pinned_num_register_threads", 1}, kv{"release_lock_on_cudamalloc", false},
			kv{"pinned_use_cuda_host_register", false},
			kv{"roundup_power2_divisions", dict(kv{"1", 0}, kv{"2", 4}, kv{"4", 0})},
		)},
	)
}

// toGo turns the test values into the plain Go values og-rek's encoder
// takes: map[string]any, []any, ogórek.Tuple, int64, ...
func toGo(v any) any {
	switch x := v.(type) {
	case *pyDict:
		m := make(map[string]any, len(x.items))
		for _, e := range x.items {
			m[e.k] = toGo(e.v)
		}
		return m
	case *pyList:
		l := make([]any, len(x.items))
		for i, e := range x.items {
			l[i] = toGo(e)
		}
		return l
	case ogórek.Tuple:
		t := make(ogórek.Tuple, len(x))
		for i, e := range x {
			t[i] = toGo(e)
		}
		return t
	case int:
		return int64(x)
	case nil:
		return ogórek.None{}
	}
	return v
}

// ogrekPickle encodes v with og-rek's encoder.
func ogrekPickle(t testing.TB, v any, proto int) []byte {
	var buf bytes.Buffer
	enc := ogórek.NewEncoderWithConfig(&buf, &ogórek.EncoderConfig{Protocol: proto})
	if err := enc.Encode(toGo(v)); err != nil {
		t.Fatalf("og-rek encode: %v", err)
	}
	return buf.Bytes()
}

// encoding is one way to write a fixture.
type encoding struct {
	name string
	data []byte
}

// encodings writes v with CPython's layout (protocols 2 to 5) and with
// og-rek's encoder (protocols 2 to 5).
func encodings(t testing.TB, v any) []encoding {
	var out []encoding
	for p := 2; p <= 5; p++ {
		out = append(out, encoding{"cpython-p" + string(rune('0'+p)), pyPickle(v, p)})
	}
	for p := 2; p <= 5; p++ {
		out = append(out, encoding{"ogrek-p" + string(rune('0'+p)), ogrekPickle(t, v, p)})
	}
	return out
}
