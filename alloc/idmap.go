package alloc

// idMap maps the caller's block ids to live blocks. It is an open-addressing
// hash table with linear probing and backward-shift deletion, so that the
// one lookup every Malloc and Free needs is a single probe sequence over one
// array; its size follows the number of live blocks, not the number of ids
// ever used. A nil value marks an empty slot.
type idMap struct {
	slots []idSlot
	n     int
	shift uint
}

type idSlot struct {
	id int64
	b  *block
}

const idMapMinSize = 64

func (m *idMap) init(capacity int) {
	size := idMapMinSize
	shift := uint(64 - 6)
	for size < 2*capacity {
		size <<= 1
		shift--
	}
	m.slots = make([]idSlot, size)
	m.shift = shift
	m.n = 0
}

// home is Fibonacci hashing: sequential ids spread over the table.
func (m *idMap) home(id int64) int {
	return int((uint64(id) * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *idMap) get(id int64) *block {
	if m.slots == nil {
		return nil
	}
	mask := len(m.slots) - 1
	for i := m.home(id); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.b == nil {
			return nil
		}
		if s.id == id {
			return s.b
		}
	}
}

// insert stores b under id unless id is present; it reports whether it
// stored it.
func (m *idMap) insert(id int64, b *block) bool {
	if m.slots == nil {
		m.init(0)
	}
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(id); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.b == nil {
			s.id, s.b = id, b
			m.n++
			return true
		}
		if s.id == id {
			return false
		}
	}
}

// remove deletes id and returns its block, or nil if absent.
func (m *idMap) remove(id int64) *block {
	if m.slots == nil {
		return nil
	}
	mask := len(m.slots) - 1
	i := m.home(id)
	for {
		s := &m.slots[i]
		if s.b == nil {
			return nil
		}
		if s.id == id {
			break
		}
		i = (i + 1) & mask
	}
	b := m.slots[i].b
	// Backward-shift: move later entries of the probe run into the hole
	// when their home position allows it.
	j := i
	for {
		j = (j + 1) & mask
		s := &m.slots[j]
		if s.b == nil {
			break
		}
		h := m.home(s.id)
		// s may move to i if i lies cyclically in [h, j).
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			m.slots[i] = *s
			i = j
		}
	}
	m.slots[i] = idSlot{}
	m.n--
	// The table does not shrink: a training step frees most of what its
	// forward pass allocated and then allocates it again, and the table
	// never holds more than the allocator's own peak count of blocks.
	return b
}

func (m *idMap) grow() { m.rehash(2 * len(m.slots)) }

func (m *idMap) rehash(size int) {
	old := m.slots
	shift := uint(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	m.slots = make([]idSlot, size)
	m.shift = shift
	m.n = 0
	mask := size - 1
	for _, s := range old {
		if s.b == nil {
			continue
		}
		for i := m.home(s.id); ; i = (i + 1) & mask {
			if m.slots[i].b == nil {
				m.slots[i] = s
				m.n++
				break
			}
		}
	}
}

func (m *idMap) len() int { return m.n }

// each calls fn for every entry.
func (m *idMap) each(fn func(id int64, b *block)) {
	for _, s := range m.slots {
		if s.b != nil {
			fn(s.id, s.b)
		}
	}
}
