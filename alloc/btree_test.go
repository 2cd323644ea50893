package alloc

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBTreeRandom drives the tree and a sorted slice with the same random
// operations and compares them after every step.
func TestBTreeRandom(t *testing.T) {
	for _, n := range []int{10, 100, 3000} {
		r := rand.New(rand.NewPCG(1, uint64(n)))
		var tr btree
		var ref []btItem
		cmp := func(x, y btItem) int {
			if x.less(y) {
				return -1
			}
			if y.less(x) {
				return 1
			}
			return 0
		}
		for step := 0; step < 20*n; step++ {
			x := btItem{size: int64(r.IntN(n)), addr: int64(r.IntN(4 * n))}
			i, found := slices.BinarySearchFunc(ref, x, cmp)
			if r.IntN(2) == 0 {
				if !found {
					tr.insert(x)
					ref = slices.Insert(ref, i, x)
				}
			} else {
				if got := tr.delete(x); got != found {
					t.Fatalf("n=%d step %d: delete %v = %v, want %v", n, step, x, got, found)
				}
				if found {
					ref = slices.Delete(ref, i, i+1)
				}
			}
			q := int64(r.IntN(n + 1))
			got, pos, ok := tr.lowerBound(q)
			j, _ := slices.BinarySearchFunc(ref, btItem{size: q, addr: -1 << 62}, cmp)
			if ok != (j < len(ref)) || (ok && got != ref[j]) {
				t.Fatalf("n=%d step %d: lowerBound(%d) = %v %v, want index %d of %d", n, step, q, got, ok, j, len(ref))
			}
			if ok && r.IntN(4) == 0 {
				// get_free_block's pop of the best fit
				tr.removeAt(pos, got)
				ref = slices.Delete(ref, j, j+1)
			}
			if step%97 == 0 {
				if err := checkTree(&tr); err != nil {
					t.Fatalf("n=%d step %d: %v", n, step, err)
				}
				all := make([]btItem, 0, len(ref))
				tr.ascendFrom(0, func(x btItem) bool { all = append(all, x); return true })
				if !slices.Equal(all, ref) {
					t.Fatalf("n=%d step %d: ascend differs", n, step)
				}
				var desc []btItem
				tr.descend(func(x btItem) bool { desc = append(desc, x); return true })
				slices.Reverse(desc)
				if !slices.Equal(desc, ref) {
					t.Fatalf("n=%d step %d: descend differs", n, step)
				}
			}
		}
		if tr.len() != len(ref) {
			t.Fatalf("n=%d: len %d, want %d", n, tr.len(), len(ref))
		}
	}
}
