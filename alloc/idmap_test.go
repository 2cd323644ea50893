package alloc

import (
	"math/rand/v2"
	"testing"
)

// TestIDMapRandom checks idMap against a Go map under random inserts and
// removes, with sequential, clustered and scattered ids.
func TestIDMapRandom(t *testing.T) {
	for _, spread := range []int64{64, 5000, 1 << 40} {
		r := rand.New(rand.NewPCG(3, uint64(spread)))
		var m idMap
		ref := map[int64]*block{}
		blocks := make([]block, 64)
		for step := 0; step < 200000; step++ {
			id := r.Int64N(spread) - spread/4
			if r.IntN(3) > 0 {
				b := &blocks[r.IntN(len(blocks))]
				_, had := ref[id]
				if got := m.insert(id, b); got == had {
					t.Fatalf("step %d: insert(%d) = %v, present %v", step, id, got, had)
				}
				if !had {
					ref[id] = b
				}
			} else {
				want := ref[id]
				if got := m.remove(id); got != want {
					t.Fatalf("step %d: remove(%d) = %p, want %p", step, id, got, want)
				}
				delete(ref, id)
			}
			if m.len() != len(ref) {
				t.Fatalf("step %d: len %d, want %d", step, m.len(), len(ref))
			}
			if step%1000 == 0 {
				for k, v := range ref {
					if m.get(k) != v {
						t.Fatalf("step %d: get(%d) wrong", step, k)
					}
				}
				n := 0
				m.each(func(int64, *block) { n++ })
				if n != len(ref) {
					t.Fatalf("step %d: each saw %d", step, n)
				}
			}
		}
	}
}
