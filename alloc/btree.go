package alloc

// btree is the ordered set of cached (free, mapped) blocks of one
// (stream, pool). PyTorch keeps BlockPool::blocks in a std::set ordered by
// BlockComparatorSize, i.e. (stream, size, ptr); keeping one set per
// (stream, pool) gives the same order within a stream, and get_free_block
// never looks past its own stream. The B-tree keeps lower_bound, insert and
// erase at O(log n) with few cache misses, which is what lets a replay run
// at tens of millions of events per second.

const (
	btDegree   = 16
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

type btNode struct {
	n        int
	leaf     bool
	items    [btMaxItems]btItem
	children [btMaxItems + 1]*btNode
}

type btree struct {
	root  *btNode
	count int
	spare []*btNode // nodes freed by merges, reused by splits
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
	for i := 0; i < n.n; i++ {
		n.items[i] = btItem{}
	}
	for i := range n.children {
		n.children[i] = nil
	}
	n.n = 0
	if len(t.spare) < 64 {
		t.spare = append(t.spare, n)
	}
}

// search returns the first index i with !(items[i] < key), i.e. the
// position of key or where it would be inserted.
func (n *btNode) search(key btItem) int {
	lo, hi := 0, n.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.items[m].less(key) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// searchSize returns the first index i with items[i].size >= size.
func (n *btNode) searchSize(size int64) int {
	lo, hi := 0, n.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.items[m].size < size {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (t *btree) len() int { return t.count }

// lowerBound returns the smallest item whose size is >= size: the
// lower_bound({stream, size}) of get_free_block.
func (t *btree) lowerBound(size int64) (btItem, bool) {
	var best btItem
	found := false
	for n := t.root; n != nil; {
		i := n.searchSize(size)
		if i < n.n {
			best = n.items[i]
			found = true
		}
		if n.leaf {
			break
		}
		n = n.children[i]
	}
	return best, found
}

func (t *btree) insert(x btItem) {
	t.count++
	if t.root == nil {
		r := t.newNode(true)
		r.items[0] = x
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
		i := n.search(x)
		if n.leaf {
			copy(n.items[i+1:n.n+1], n.items[i:n.n])
			n.items[i] = x
			n.n++
			return
		}
		if n.children[i].n == btMaxItems {
			t.splitChild(n, i)
			if n.items[i].less(x) {
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
	copy(z.items[:btDegree-1], y.items[btDegree:btMaxItems])
	if !y.leaf {
		copy(z.children[:btDegree], y.children[btDegree:btMaxItems+1])
		for j := btDegree; j <= btMaxItems; j++ {
			y.children[j] = nil
		}
	}
	median := y.items[btDegree-1]
	for j := btDegree - 1; j < btMaxItems; j++ {
		y.items[j] = btItem{}
	}
	y.n = btDegree - 1
	copy(x.children[i+2:x.n+2], x.children[i+1:x.n+1])
	x.children[i+1] = z
	copy(x.items[i+1:x.n+1], x.items[i:x.n])
	x.items[i] = median
	x.n++
}

// delete removes the item with x's key; it reports whether it was there.
func (t *btree) delete(x btItem) bool {
	if t.root == nil {
		return false
	}
	ok := t.remove(t.root, x)
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
func (t *btree) remove(n *btNode, x btItem) bool {
	for {
		i := n.search(x)
		found := i < n.n && !x.less(n.items[i])
		if n.leaf {
			if !found {
				return false
			}
			copy(n.items[i:n.n-1], n.items[i+1:n.n])
			n.n--
			n.items[n.n] = btItem{}
			return true
		}
		if found {
			y, z := n.children[i], n.children[i+1]
			switch {
			case y.n > btMinItems:
				pred := y.max()
				n.items[i] = pred
				n, x = y, pred
			case z.n > btMinItems:
				succ := z.min()
				n.items[i] = succ
				n, x = z, succ
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

func (n *btNode) max() btItem {
	for !n.leaf {
		n = n.children[n.n]
	}
	return n.items[n.n-1]
}

func (n *btNode) min() btItem {
	for !n.leaf {
		n = n.children[0]
	}
	return n.items[0]
}

// merge joins x.children[i], x.items[i] and x.children[i+1] into
// x.children[i].
func (t *btree) merge(x *btNode, i int) {
	y, z := x.children[i], x.children[i+1]
	y.items[y.n] = x.items[i]
	copy(y.items[y.n+1:], z.items[:z.n])
	if !y.leaf {
		copy(y.children[y.n+1:], z.children[:z.n+1])
	}
	y.n += z.n + 1
	copy(x.items[i:x.n-1], x.items[i+1:x.n])
	copy(x.children[i+1:x.n], x.children[i+2:x.n+1])
	x.n--
	x.items[x.n] = btItem{}
	x.children[x.n+1] = nil
	t.freeNode(z)
}

// rotateRight moves the last item of x.children[i-1] up into x and x's
// separator down into the front of x.children[i].
func (t *btree) rotateRight(x *btNode, i int) {
	c, l := x.children[i], x.children[i-1]
	copy(c.items[1:c.n+1], c.items[:c.n])
	c.items[0] = x.items[i-1]
	if !c.leaf {
		copy(c.children[1:c.n+2], c.children[:c.n+1])
		c.children[0] = l.children[l.n]
		l.children[l.n] = nil
	}
	c.n++
	x.items[i-1] = l.items[l.n-1]
	l.items[l.n-1] = btItem{}
	l.n--
}

// rotateLeft moves the first item of x.children[i+1] up into x and x's
// separator down onto the end of x.children[i].
func (t *btree) rotateLeft(x *btNode, i int) {
	c, r := x.children[i], x.children[i+1]
	c.items[c.n] = x.items[i]
	if !c.leaf {
		c.children[c.n+1] = r.children[0]
		copy(r.children[:r.n], r.children[1:r.n+1])
		r.children[r.n] = nil
	}
	c.n++
	x.items[i] = r.items[0]
	copy(r.items[:r.n-1], r.items[1:r.n])
	r.n--
	r.items[r.n] = btItem{}
}

// ascendFrom calls fn for every item with size >= size in ascending order
// until fn returns false.
func (t *btree) ascendFrom(size int64, fn func(btItem) bool) {
	if t.root != nil {
		t.root.ascendFrom(size, fn)
	}
}

func (n *btNode) ascendFrom(size int64, fn func(btItem) bool) bool {
	i := n.searchSize(size)
	for ; i < n.n; i++ {
		if !n.leaf && !n.children[i].ascendFrom(size, fn) {
			return false
		}
		if !fn(n.items[i]) {
			return false
		}
	}
	if !n.leaf {
		return n.children[n.n].ascendFrom(size, fn)
	}
	return true
}

// descend calls fn for every item in descending order until fn returns
// false.
func (t *btree) descend(fn func(btItem) bool) {
	if t.root != nil {
		t.root.descend(fn)
	}
}

func (n *btNode) descend(fn func(btItem) bool) bool {
	for i := n.n; i >= 0; i-- {
		if !n.leaf && !n.children[i].descend(fn) {
			return false
		}
		if i > 0 && !fn(n.items[i-1]) {
			return false
		}
	}
	return true
}

// appendAll appends every block in ascending order to dst.
func (t *btree) appendAll(dst []*block) []*block {
	if t.root != nil {
		dst = t.root.appendAll(dst)
	}
	return dst
}

func (n *btNode) appendAll(dst []*block) []*block {
	for i := 0; i < n.n; i++ {
		if !n.leaf {
			dst = n.children[i].appendAll(dst)
		}
		dst = append(dst, n.items[i].b)
	}
	if !n.leaf {
		dst = n.children[n.n].appendAll(dst)
	}
	return dst
}
