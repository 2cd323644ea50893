package snapshot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	ogórek "github.com/kisielk/og-rek"
)

// pyPickle writes values the way CPython's pickler (Modules/_pickle.c)
// does, byte for byte, so that tests exercise the opcodes real snapshot
// files contain: PROTO, FRAME (protocol 4+), MEMOIZE or BINPUT, BINGET for
// objects seen before, EMPTY_LIST/EMPTY_DICT followed by APPENDS/SETITEMS
// in batches of 1000, LONG1 for ints beyond 32 bits. og-rek's own encoder
// writes none of these (no memo, no frames, MARK...LIST), so it cannot
// reproduce the shared lists of a real snapshot. TestPyPickleMatchesCPython
// pins the output to bytes produced by CPython 3.11.
//
// Values: *pyDict and *pyList (their pointer is their identity, like a
// Python object's id), string (equal strings are one object, as the
// interned keys of a snapshot are), int, int64, bool, nil, float64,
// ogórek.Tuple.
type pyDict struct{ items []kv }

type kv struct {
	k string
	v any
}

type pyList struct{ items []any }

func dict(items ...kv) *pyDict { return &pyDict{items} }
func lst(items ...any) *pyList { return &pyList{items} }

type pyPickler struct {
	proto int
	out   bytes.Buffer // committed output
	frame bytes.Buffer // current frame (protocol 4+)
	memo  map[any]int
}

func pyPickle(v any, proto int) []byte {
	p := &pyPickler{proto: proto, memo: make(map[any]int)}
	p.out.Write([]byte{0x80, byte(proto)})
	p.save(v)
	p.frame.WriteByte('.')
	p.commit()
	return p.out.Bytes()
}

const frameSizeTarget = 64 << 10 // _FRAME_SIZE_TARGET

func (p *pyPickler) w(b ...byte) { p.frame.Write(b) }

// boundary ends a frame once it is large enough (_Pickler_OpcodeBoundary).
func (p *pyPickler) boundary() {
	if p.proto >= 4 && p.frame.Len() >= frameSizeTarget {
		p.commit()
	}
}

func (p *pyPickler) commit() {
	if p.frame.Len() == 0 {
		return
	}
	if p.proto >= 4 && p.frame.Len() >= 4 { // _FRAME_SIZE_MIN
		var h [9]byte
		h[0] = 0x95
		binary.LittleEndian.PutUint64(h[1:], uint64(p.frame.Len()))
		p.out.Write(h[:])
	}
	p.out.Write(p.frame.Bytes())
	p.frame.Reset()
}

func (p *pyPickler) memoize(id any) {
	n := len(p.memo)
	p.memo[id] = n
	switch {
	case p.proto >= 4:
		p.w(0x94)
	case n < 256:
		p.w('q', byte(n))
	default:
		p.w('r')
		p.w(le32(uint32(n))...)
	}
}

func le32(n uint32) []byte {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], n)
	return b[:]
}

func (p *pyPickler) get(id any) bool {
	n, ok := p.memo[id]
	if !ok {
		return false
	}
	if n < 256 {
		p.w('h', byte(n))
	} else {
		p.w('j')
		p.w(le32(uint32(n))...)
	}
	return true
}

func (p *pyPickler) save(v any) {
	defer p.boundary()
	switch x := v.(type) {
	case nil:
		p.w('N')
	case bool:
		if x {
			p.w(0x88)
		} else {
			p.w(0x89)
		}
	case int:
		p.saveInt(int64(x))
	case int64:
		p.saveInt(x)
	case *big.Int:
		p.saveLong(x)
	case float64:
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(x))
		p.w('G')
		p.w(b[:]...)
	case string:
		key := "str:" + x
		if p.get(key) {
			return
		}
		if len(x) < 256 && p.proto >= 4 {
			p.w(0x8c, byte(len(x)))
		} else {
			p.w('X')
			p.w(le32(uint32(len(x)))...)
		}
		p.w([]byte(x)...)
		p.memoize(key)
	case ogórek.Tuple:
		if len(x) == 0 {
			p.w(')')
			return
		}
		if len(x) <= 3 {
			for _, e := range x {
				p.save(e)
			}
			p.w(0x84 + byte(len(x))) // TUPLE1..3
		} else {
			p.w('(')
			for _, e := range x {
				p.save(e)
			}
			p.w('t')
		}
		p.memoize(new(int)) // a tuple is never referenced again here
	case *pyList:
		if p.get(x) {
			return
		}
		p.w(']')
		p.memoize(x)
		for i := 0; i < len(x.items); i += 1000 {
			batch := x.items[i:min(i+1000, len(x.items))]
			if len(batch) == 1 {
				p.save(batch[0])
				p.w('a')
				continue
			}
			p.w('(')
			for _, e := range batch {
				p.save(e)
			}
			p.w('e')
		}
	case *pyDict:
		if p.get(x) {
			return
		}
		p.w('}')
		p.memoize(x)
		for i := 0; i < len(x.items); i += 1000 {
			batch := x.items[i:min(i+1000, len(x.items))]
			if len(batch) == 1 {
				p.save(batch[0].k)
				p.save(batch[0].v)
				p.w('s')
				continue
			}
			p.w('(')
			for _, e := range batch {
				p.save(e.k)
				p.save(e.v)
			}
			p.w('u')
		}
	default:
		panic(fmt.Sprintf("pyPickle: unsupported %T", v))
	}
}

// saveInt follows save_long in _pickle.c for protocol 2+.
func (p *pyPickler) saveInt(x int64) {
	switch {
	case x >= 0 && x <= 0xff:
		p.w('K', byte(x))
	case x >= 0 && x <= 0xffff:
		p.w('M', byte(x), byte(x>>8))
	case x >= math.MinInt32 && x <= math.MaxInt32:
		p.w('J')
		p.w(le32(uint32(int32(x)))...)
	default:
		p.saveLong(big.NewInt(x))
	}
}

// saveLong writes LONG1: little-endian two's complement in
// (bit_length >> 3) + 1 bytes, trimmed for negatives as encode_long does.
func (p *pyPickler) saveLong(b *big.Int) {
	{
		x := b.Sign()
		n := b.BitLen()>>3 + 1
		u := new(big.Int).Set(b)
		if x < 0 {
			u.Add(u, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
		}
		data := make([]byte, n)
		ub := u.Bytes()
		for i := range ub {
			data[i] = ub[len(ub)-1-i]
		}
		if x < 0 && n > 1 && data[n-1] == 0xff && data[n-2]&0x80 != 0 {
			data = data[:n-1]
		}
		p.w(0x8a, byte(len(data)))
		p.w(data...)
	}
}
