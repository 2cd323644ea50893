package alloc

// btree is the ordered set of cached (free, mapped) blocks of one
// (stream, pool). PyTorch keeps BlockPool::blocks in a std::set ordered by
// BlockComparatorSize, i.e. (stream, size, ptr); keeping one set per
// (stream, pool) gives the same order within a stream, and get_free_block
// never looks past its own stream. The B-tree keeps lower_bound, insert and
// erase at O(log n) with few cache misses, which is what lets a replay run
// at tens of millions of events per second.

const (
	btDegree   = 12
	btMaxItems = 2*btDegree - 1
	btMinItems = btDegree - 1
)

// btItem is one entry: the key (size, addr) copied out of the block so that
// comparisons do not chase the pointer.
type btItem struct {
	size int64
	addr int64
	b    *block
}

func (x btItem) less(y btItem) bool {
	if x.size != y.size {
		return x.size < y.size
	}
	return x.addr < y.addr
}

// btNode keeps keys and block pointers in parallel arrays: searches touch
// only the keys, and shifting keys is a plain memmove.
type btNode struct {
	n    int
	leaf bool
	keys [btMaxItems]btKey
	// vals name the blocks by their arena index (0: none), not by pointer:
	// shifting entries is then a plain memmove, free of the write barriers
	// a pointer array pays while the garbage collector is marking.
	vals     [btMaxItems]uint32
	children [btMaxItems + 1]*btNode
}

type btKey struct{ size, addr int64 }

func (x btKey) less(y btKey) bool {
	return x.size < y.size || (x.size == y.size && x.addr < y.addr)
}

func (t *btree) item(n *btNode, i int) btItem {
	return btItem{size: n.keys[i].size, addr: n.keys[i].addr, b: t.arena.at(n.vals[i])}
}

func (n *btNode) setItem(i int, x btItem) {
	n.keys[i] = btKey{x.size, x.addr}
	n.vals[i] = 0
	if x.b != nil {
		n.vals[i] = x.b.idx
	}
}

// shiftRight opens a gap at i by moving entries i..n-1 one place right.
func (n *btNode) shiftRight(i int) {
	copy(n.keys[i+1:n.n+1], n.keys[i:n.n])
	copy(n.vals[i+1:n.n+1], n.vals[i:n.n])
}

// shiftLeft closes the gap at i by moving entries i+1..n-1 one place left.
func (n *btNode) shiftLeft(i int) {
	copy(n.keys[i:n.n-1], n.keys[i+1:n.n])
	copy(n.vals[i:n.n-1], n.vals[i+1:n.n])
}

type btree struct {
	root  *btNode
	count int
	spare []*btNode // nodes freed by merges, reused by splits
	arena *blockArena
}

func (t *btree) newNode(leaf bool) *btNode {
	if k := len(t.spare); k > 0 {
		n := t.spare[k-1]
		t.spare = t.spare[:k-1]
		n.leaf = leaf
		return n
	}
	return &btNode{leaf: leaf}
}

func (t *btree) freeNode(n *btNode) {
	*n = btNode{}
	if len(t.spare) < 64 {
		t.spare = append(t.spare, n)
	}
}

// search returns the first index i with !(keys[i] < key), i.e. the
// position of key or where it would be inserted. A linear scan beats a
// binary search at this node size: its one branch is predictable.
func (n *btNode) search(key btKey) int {
	i := 0
	for i < n.n && n.keys[i].less(key) {
		i++
	}
	return i
}

// searchSize returns the first index i with keys[i].size >= size.
func (n *btNode) searchSize(size int64) int {
	i := 0
	for i < n.n && n.keys[i].size < size {
		i++
	}
	return i
}

func (t *btree) len() int { return t.count }

// lowerBound returns the smallest item whose size is >= size: the
// lower_bound({stream, size}) of get_free_block. It also returns where the
// item sits, for removeAt.
func (t *btree) lowerBound(size int64) (btItem, btPos, bool) {
	var best *btNode
	bi := 0
	for n := t.root; n != nil; {
		i := n.searchSize(size)
		if i < n.n {
			best, bi = n, i
		}
		if n.leaf {
			break
		}
		n = n.children[i]
	}
	if best == nil {
		return btItem{}, btPos{}, false
	}
	return t.item(best, bi), btPos{best, bi}, true
}

// btPos is the place of an item found by lowerBound; it is valid until the
// tree changes.
type btPos struct {
	n *btNode
	i int
}

// removeAt removes the item at p, which holds x. A leaf that stays at or
// above the minimum fill loses it in place; anything else takes the full
// top-down delete.
func (t *btree) removeAt(p btPos, x btItem) {
	n := p.n
	if n != nil && n.leaf && (n.n > btMinItems || n == t.root) && n.n > 1 {
		n.shiftLeft(p.i)
		n.n--
		n.keys[n.n] = btKey{}
		n.vals[n.n] = 0
		t.count--
		return
	}
	t.delete(x)
}

func (t *btree) insert(x btItem) {
	t.count++
	key := btKey{x.size, x.addr}
	if t.root == nil {
		r := t.newNode(true)
		r.setItem(0, x)
		r.n = 1
		t.root = r
		return
	}
	if t.root.n == btMaxItems {
		s := t.newNode(false)
		s.children[0] = t.root
		t.root = s
		t.splitChild(s, 0)
	}
	n := t.root
	for {
		i := n.search(key)
		if n.leaf {
			n.shiftRight(i)
			n.setItem(i, x)
			n.n++
			return
		}
		if n.children[i].n == btMaxItems {
			t.splitChild(n, i)
			if n.keys[i].less(key) {
				i++
			}
		}
		n = n.children[i]
	}
}

// splitChild splits the full child x.children[i] around its median, which
// moves up into x at position i.
func (t *btree) splitChild(x *btNode, i int) {
	y := x.children[i]
	z := t.newNode(y.leaf)
	z.n = btDegree - 1
	copy(z.keys[:btDegree-1], y.keys[btDegree:btMaxItems])
	copy(z.vals[:btDegree-1], y.vals[btDegree:btMaxItems])
	if !y.leaf {
		copy(z.children[:btDegree], y.children[btDegree:btMaxItems+1])
		clear(y.children[btDegree : btMaxItems+1])
	}
	median := t.item(y, btDegree-1)
	clear(y.keys[btDegree-1 : btMaxItems])
	clear(y.vals[btDegree-1 : btMaxItems])
	y.n = btDegree - 1
	copy(x.children[i+2:x.n+2], x.children[i+1:x.n+1])
	x.children[i+1] = z
	x.shiftRight(i)
	x.setItem(i, median)
	x.n++
}

// delete removes the item with x's key; it reports whether it was there.
func (t *btree) delete(x btItem) bool {
	if t.root == nil {
		return false
	}
	ok := t.remove(t.root, btKey{x.size, x.addr})
	if ok {
		t.count--
	}
	if t.root.n == 0 {
		old := t.root
		if t.root.leaf {
			t.root = nil
		} else {
			t.root = t.root.children[0]
		}
		t.freeNode(old)
	}
	return ok
}

// remove is CLRS B-TREE-DELETE: every node it descends into has at least
// btDegree items, so a removal from a leaf never underflows.
func (t *btree) remove(n *btNode, key btKey) bool {
	for {
		i := n.search(key)
		found := i < n.n && !key.less(n.keys[i])
		if n.leaf {
			if !found {
				return false
			}
			n.shiftLeft(i)
			n.n--
			n.keys[n.n] = btKey{}
			n.vals[n.n] = 0
			return true
		}
		if found {
			y, z := n.children[i], n.children[i+1]
			switch {
			case y.n > btMinItems:
				pred := t.max(y)
				n.setItem(i, pred)
				n, key = y, btKey{pred.size, pred.addr}
			case z.n > btMinItems:
				succ := t.min(z)
				n.setItem(i, succ)
				n, key = z, btKey{succ.size, succ.addr}
			default:
				t.merge(n, i)
				n = y
			}
			continue
		}
		c := n.children[i]
		if c.n == btMinItems {
			switch {
			case i > 0 && n.children[i-1].n > btMinItems:
				t.rotateRight(n, i)
			case i < n.n && n.children[i+1].n > btMinItems:
				t.rotateLeft(n, i)
			case i < n.n:
				t.merge(n, i)
			default:
				t.merge(n, i-1)
				c = n.children[i-1]
			}
		}
		n = c
	}
}

func (t *btree) max(n *btNode) btItem {
	for !n.leaf {
		n = n.children[n.n]
	}
	return t.item(n, n.n-1)
}

func (t *btree) min(n *btNode) btItem {
	for !n.leaf {
		n = n.children[0]
	}
	return t.item(n, 0)
}

// merge joins x.children[i], x's entry i and x.children[i+1] into
// x.children[i].
func (t *btree) merge(x *btNode, i int) {
	y, z := x.children[i], x.children[i+1]
	y.keys[y.n], y.vals[y.n] = x.keys[i], x.vals[i]
	copy(y.keys[y.n+1:], z.keys[:z.n])
	copy(y.vals[y.n+1:], z.vals[:z.n])
	if !y.leaf {
		copy(y.children[y.n+1:], z.children[:z.n+1])
	}
	y.n += z.n + 1
	x.shiftLeft(i)
	copy(x.children[i+1:x.n], x.children[i+2:x.n+1])
	x.n--
	x.keys[x.n], x.vals[x.n] = btKey{}, 0
	x.children[x.n+1] = nil
	t.freeNode(z)
}

// rotateRight moves the last entry of x.children[i-1] up into x and x's
// separator down into the front of x.children[i].
func (t *btree) rotateRight(x *btNode, i int) {
	c, l := x.children[i], x.children[i-1]
	c.shiftRight(0)
	c.keys[0], c.vals[0] = x.keys[i-1], x.vals[i-1]
	if !c.leaf {
		copy(c.children[1:c.n+2], c.children[:c.n+1])
		c.children[0] = l.children[l.n]
		l.children[l.n] = nil
	}
	c.n++
	x.keys[i-1], x.vals[i-1] = l.keys[l.n-1], l.vals[l.n-1]
	l.keys[l.n-1], l.vals[l.n-1] = btKey{}, 0
	l.n--
}

// rotateLeft moves the first entry of x.children[i+1] up into x and x's
// separator down onto the end of x.children[i].
func (t *btree) rotateLeft(x *btNode, i int) {
	c, r := x.children[i], x.children[i+1]
	c.keys[c.n], c.vals[c.n] = x.keys[i], x.vals[i]
	if !c.leaf {
		c.children[c.n+1] = r.children[0]
		copy(r.children[:r.n], r.children[1:r.n+1])
		r.children[r.n] = nil
	}
	c.n++
	x.keys[i], x.vals[i] = r.keys[0], r.vals[0]
	r.shiftLeft(0)
	r.n--
	r.keys[r.n], r.vals[r.n] = btKey{}, 0
}

// ascendFrom calls fn for every item with size >= size in ascending order
// until fn returns false.
func (t *btree) ascendFrom(size int64, fn func(btItem) bool) {
	if t.root != nil {
		t.ascendNode(t.root, size, fn)
	}
}

func (t *btree) ascendNode(n *btNode, size int64, fn func(btItem) bool) bool {
	i := n.searchSize(size)
	for ; i < n.n; i++ {
		if !n.leaf && !t.ascendNode(n.children[i], size, fn) {
			return false
		}
		if !fn(t.item(n, i)) {
			return false
		}
	}
	if !n.leaf {
		return t.ascendNode(n.children[n.n], size, fn)
	}
	return true
}

// descend calls fn for every item in descending order until fn returns
// false.
func (t *btree) descend(fn func(btItem) bool) {
	if t.root != nil {
		t.descendNode(t.root, fn)
	}
}

func (t *btree) descendNode(n *btNode, fn func(btItem) bool) bool {
	for i := n.n; i >= 0; i-- {
		if !n.leaf && !t.descendNode(n.children[i], fn) {
			return false
		}
		if i > 0 && !fn(t.item(n, i-1)) {
			return false
		}
	}
	return true
}

// appendAll appends every block in ascending order to dst.
func (t *btree) appendAll(dst []*block) []*block {
	if t.root != nil {
		dst = t.appendNode(t.root, dst)
	}
	return dst
}

func (t *btree) appendNode(n *btNode, dst []*block) []*block {
	for i := 0; i < n.n; i++ {
		if !n.leaf {
			dst = t.appendNode(n.children[i], dst)
		}
		dst = append(dst, t.arena.at(n.vals[i]))
	}
	if !n.leaf {
		dst = t.appendNode(n.children[n.n], dst)
	}
	return dst
}

// blockArena holds an allocator's blocks in chunks that never move, so
// that a block has a small index for as long as it lives: the free-block
// trees store indexes (see btNode).
type blockArena struct {
	chunks [][]block
	free   []uint32
	next   uint32 // the next never-used index; 0 names no block
}

const arenaChunk = 1024

// at returns the block with index i; nil for 0 (and for a tree without an
// arena, which holds only bare keys).
func (ar *blockArena) at(i uint32) *block {
	if i == 0 || ar == nil {
		return nil
	}
	return &ar.chunks[i/arenaChunk][i%arenaChunk]
}

func (ar *blockArena) alloc() *block {
	if k := len(ar.free); k > 0 {
		i := ar.free[k-1]
		ar.free = ar.free[:k-1]
		return ar.at(i)
	}
	ar.next = max(ar.next, 1)
	if int(ar.next/arenaChunk) == len(ar.chunks) {
		ar.chunks = append(ar.chunks, make([]block, arenaChunk))
	}
	b := ar.at(ar.next)
	b.idx = ar.next
	ar.next++
	return b
}

func (ar *blockArena) release(b *block) {
	i := b.idx
	*b = block{idx: i}
	ar.free = append(ar.free, i)
}
