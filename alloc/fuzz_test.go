package alloc

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// runFuzzOps drives an allocator from bytes: the first byte picks the
// configuration and device, then each 3-byte group is one operation. The
// invariants are checked after every operation.
func runFuzzOps(t *testing.T, data []byte) {
	if len(data) < 1 {
		return
	}
	flags := data[0]
	data = data[1:]
	var cfg Config
	if flags&1 != 0 {
		cfg.ExpandableSegments = true
	}
	if flags&2 != 0 {
		cfg.MaxSplitSize = 32 * MiB
	}
	if flags&4 != 0 {
		cfg.RoundupPower2Divisions = all(4)
	}
	dev := Device{Capacity: int64(1+flags>>4) * 32 * MiB}
	if flags&8 != 0 {
		dev.MemoryFraction = 0.75
		cfg.GarbageCollectionThreshold = 0.5
	}
	a := New(cfg, dev)
	var live []int64
	id := int64(0)
	// Long inputs add nothing but time: every step checks every block.
	data = data[:min(len(data), 3*512)]
	for len(data) >= 3 {
		o, x := data[0], int64(data[1])<<8|int64(data[2])
		data = data[3:]
		switch o % 8 {
		case 0, 1, 2:
			size := x << (6 * ((o >> 3) & 3)) // bytes, x64, x4096, x262144: up to 16 GiB
			stream := int32(o>>6) & 1
			err := a.Malloc(id, size, stream)
			var oom *OOMError
			switch {
			case errors.As(err, &oom):
				if oom.Reserved > dev.Capacity || oom.AllocSize < oom.Size {
					t.Fatalf("bad oom %+v", oom)
				}
			case err != nil:
				t.Fatalf("malloc(%d, %d): %v", id, size, err)
			default:
				live = append(live, id)
			}
			id++
		case 3, 4, 5:
			if len(live) > 0 {
				i := int(x) % len(live)
				if err := a.Free(live[i]); err != nil {
					t.Fatal(err)
				}
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
		case 6:
			before := a.Stats().Reserved
			if rel := a.EmptyCache(); rel != before-a.Stats().Reserved || rel < 0 {
				t.Fatalf("empty_cache released %d of %d", rel, before)
			}
		case 7:
			a.ResetPeaks()
		}
		if err := checkInvariants(a); err != nil {
			t.Fatalf("after op %d: %v", id, err)
		}
	}
	// Everything freed and the cache emptied leaves nothing reserved.
	for _, i := range live {
		if err := a.Free(i); err != nil {
			t.Fatal(err)
		}
	}
	a.EmptyCache()
	if st := a.Stats(); st.Reserved != 0 || st.Allocated != 0 || st.NumSegments != 0 {
		t.Fatalf("after freeing all: %+v", st)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0x30, 0, 0, 100, 8, 0x80, 0, 3, 0, 0, 6, 0, 0})
	f.Add([]byte{0x31, 0, 0, 100, 8, 0x80, 0, 3, 0, 0, 6, 0, 0})
	f.Add([]byte{0xfb, 16, 0x40, 0, 8, 0x10, 0, 3, 0, 1, 0x10, 0x01, 0, 6, 0, 0})
	f.Fuzz(runFuzzOps)
}

// TestRandomOps runs the fuzz body on pseudo-random inputs, so the
// invariants are exercised by a plain go test across every configuration.
func TestRandomOps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 300; i++ {
		data := make([]byte, 1+3*r.IntN(400))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		data[0] = byte(i)
		runFuzzOps(t, data)
	}
}
