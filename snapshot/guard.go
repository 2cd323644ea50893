package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The guard sits between the input and og-rek's decoder (github.com/
// kisielk/og-rek v1.3.0). It reads the pickle one opcode at a time, checks
// it, and hands og-rek exactly that opcode, so that:
//
//   - malformed or truncated input fails with the offset and opcode
//     involved, before og-rek sees it;
//   - a declared length (BINUNICODE, BINBYTES, BYTEARRAY8, FRAME) larger
//     than what is left of the input or of Options.MaxBytes is an error,
//     not a read attempt; text arguments (INT, LONG, STRING, GET, ...) have
//     a length cap, because og-rek parses long decimal numbers with
//     math/big in superlinear time;
//   - opcodes og-rek v1.3.0 cannot decode (BINUNICODE8, LONG4, EMPTY_SET,
//     NEWOBJ, BUILD, ...) are reported by name; a memory snapshot is plain
//     data and never contains them;
//   - og-rek's memo bug for lists is worked around (see rememo below);
//   - with Options.Frames false, the values of "frames" keys are replaced
//     by None as they stream past, so og-rek never builds them.
//   - the work is counted against MaxOps, each memo reference (og-rek has
//     no hook for them) costing the size of what it refers to, and
//     strings against MaxString and MaxText (limits.go).
//
// The guard tracks the shape of the pickle machine's stack (marks, lists,
// dicts, strings; never values), which is what these checks need.
//
// og-rek's memo bug: og-rek stores a copy of the Go slice header in the memo
// when a list is memoized. Python memoizes a list right after EMPTY_LIST,
// before APPEND/APPENDS fill it, so a later BINGET of that list returns the
// empty (or partial) header. Real snapshots share lists: torch/csrc/cuda/
// memory_snapshot.cpp reuses one frames list for every entry recorded with
// the same traceback, and one empty_frames list for all entries without
// one. The guard therefore follows every APPEND/APPENDS to a memoized list
// with a LONG_BINPUT (or PUT) that stores the list's new header under the
// same memo key again.

// maxStack bounds the pickle machine's stack. Python's pickler batches
// APPENDS/SETITEMS by 1000 and a snapshot nests a few levels deep, so real
// snapshots stay far below it.
const maxStack = 1 << 20

const (
	maxNumberLine = 4096      // INT, LONG, FLOAT: og-rek parses big decimals in superlinear time
	maxKeyLine    = 32        // GET, PUT memo keys
	maxTextLine   = MaxString // STRING, UNICODE, GLOBAL, PERSID
	shortPayload  = 64        // string payloads up to this size are inspected ("frames")
)

// PickleError is a problem found in the pickle stream itself.
type PickleError struct {
	Offset int64  // offset of the opcode in the input
	Opcode string // name of the opcode, or "" before it is known
	Msg    string
	Err    error // underlying error, if any
}

func (e *PickleError) Error() string {
	msg := e.Msg
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Opcode == "" {
		return fmt.Sprintf("pickle offset %d: %s", e.Offset, msg)
	}
	return fmt.Sprintf("pickle offset %d (%s): %s", e.Offset, e.Opcode, msg)
}

func (e *PickleError) Unwrap() error { return e.Err }

// ErrTooLarge is wrapped by errors for input beyond Options.MaxBytes.
var ErrTooLarge = errors.New("input exceeds Options.MaxBytes")

type argKind uint8

const (
	argNone       argKind = iota
	arg1                  // one byte
	arg2                  // two bytes
	arg4                  // four bytes
	arg8                  // eight bytes
	argLen1               // one-byte length, then data
	argLen4               // four-byte unsigned length, then data
	argLen4Signed         // four-byte signed length, then data (BINSTRING)
	argLen8               // eight-byte length, then data
	argNumberLine         // decimal text up to '\n'
	argKeyLine            // memo key up to '\n'
	argTextLine           // text up to '\n'
	argTwoLines           // GLOBAL: module and name lines
)

type effect uint8

const (
	effNone effect = iota
	effPush
	effMark
	effStop
	effPop
	effDup
	effPopPush     // pop n (no marks), push one
	effPopMarkPush // pop through the topmost mark, push one
	effAppend
	effAppends
	effSetitem
	effSetitems
	effMemo
	effGet
	effProto
	effFrame
)

// Kinds of stack slots the guard distinguishes.
const (
	kOther uint8 = iota
	kMark
	kList
	kDict
	kStr
	kStrFrames // the string "frames"
)

type opInfo struct {
	name string
	arg  argKind
	eff  effect
	kind uint8 // kind pushed
	n    int   // for effPopPush: slots popped
	// unsupported: og-rek v1.3.0 has no handler (or only an error).
	unsupported bool
}

var ops [256]opInfo

func init() {
	def := func(op byte, name string, arg argKind, eff effect, kind uint8, n int) {
		ops[op] = opInfo{name: name, arg: arg, eff: eff, kind: kind, n: n}
	}
	no := func(op byte, name string) { ops[op] = opInfo{name: name, unsupported: true} }
	// Names as in CPython's Lib/pickletools.py.
	def('(', "MARK", argNone, effMark, kMark, 0)
	def('.', "STOP", argNone, effStop, 0, 0)
	def('0', "POP", argNone, effPop, 0, 0)
	no('1', "POP_MARK")
	def('2', "DUP", argNone, effDup, 0, 0)
	def('F', "FLOAT", argNumberLine, effPush, kOther, 0)
	def('I', "INT", argNumberLine, effPush, kOther, 0)
	def('J', "BININT", arg4, effPush, kOther, 0)
	def('K', "BININT1", arg1, effPush, kOther, 0)
	def('L', "LONG", argNumberLine, effPush, kOther, 0)
	def('M', "BININT2", arg2, effPush, kOther, 0)
	def('N', "NONE", argNone, effPush, kOther, 0)
	def('P', "PERSID", argTextLine, effPush, kOther, 0)
	def('Q', "BINPERSID", argNone, effPopPush, kOther, 1)
	def('R', "REDUCE", argNone, effPopPush, kOther, 2)
	def('S', "STRING", argTextLine, effPush, kStr, 0)
	def('T', "BINSTRING", argLen4Signed, effPush, kStr, 0)
	def('U', "SHORT_BINSTRING", argLen1, effPush, kStr, 0)
	def('V', "UNICODE", argTextLine, effPush, kStr, 0)
	def('X', "BINUNICODE", argLen4, effPush, kStr, 0)
	def('a', "APPEND", argNone, effAppend, 0, 0)
	no('b', "BUILD")
	def('c', "GLOBAL", argTwoLines, effPush, kOther, 0)
	def('d', "DICT", argNone, effPopMarkPush, kDict, 0)
	def('}', "EMPTY_DICT", argNone, effPush, kDict, 0)
	def('e', "APPENDS", argNone, effAppends, 0, 0)
	def('g', "GET", argKeyLine, effGet, 0, 0)
	def('h', "BINGET", arg1, effGet, 0, 0)
	no('i', "INST")
	def('j', "LONG_BINGET", arg4, effGet, 0, 0)
	def('l', "LIST", argNone, effPopMarkPush, kList, 0)
	def(']', "EMPTY_LIST", argNone, effPush, kList, 0)
	no('o', "OBJ")
	def('p', "PUT", argKeyLine, effMemo, 0, 0)
	def('q', "BINPUT", arg1, effMemo, 0, 0)
	def('r', "LONG_BINPUT", arg4, effMemo, 0, 0)
	def('s', "SETITEM", argNone, effSetitem, 0, 0)
	def('t', "TUPLE", argNone, effPopMarkPush, kOther, 0)
	def(')', "EMPTY_TUPLE", argNone, effPush, kOther, 0)
	def('u', "SETITEMS", argNone, effSetitems, 0, 0)
	def('G', "BINFLOAT", arg8, effPush, kOther, 0)
	def(0x80, "PROTO", arg1, effProto, 0, 0)
	no(0x81, "NEWOBJ")
	no(0x82, "EXT1")
	no(0x83, "EXT2")
	no(0x84, "EXT4")
	def(0x85, "TUPLE1", argNone, effPopPush, kOther, 1)
	def(0x86, "TUPLE2", argNone, effPopPush, kOther, 2)
	def(0x87, "TUPLE3", argNone, effPopPush, kOther, 3)
	def(0x88, "NEWTRUE", argNone, effPush, kOther, 0)
	def(0x89, "NEWFALSE", argNone, effPush, kOther, 0)
	def(0x8a, "LONG1", argLen1, effPush, kOther, 0)
	no(0x8b, "LONG4")
	def('B', "BINBYTES", argLen4, effPush, kOther, 0)
	def('C', "SHORT_BINBYTES", argLen1, effPush, kOther, 0)
	def(0x8c, "SHORT_BINUNICODE", argLen1, effPush, kStr, 0)
	no(0x8d, "BINUNICODE8")
	no(0x8e, "BINBYTES8")
	no(0x8f, "EMPTY_SET")
	no(0x90, "ADDITEMS")
	no(0x91, "FROZENSET")
	no(0x92, "NEWOBJ_EX")
	def(0x93, "STACK_GLOBAL", argNone, effPopPush, kOther, 2)
	def(0x94, "MEMOIZE", argNone, effMemo, 0, 0)
	def(0x95, "FRAME", arg8, effFrame, 0, 0)
	def(0x96, "BYTEARRAY8", argLen8, effPush, kOther, 0)
	no(0x97, "NEXT_BUFFER")
	no(0x98, "READONLY_BUFFER")
}

type slot struct {
	kind    uint8
	rememo  uint8  // how to store this list in the memo again: remNone, remBin, remPut
	markIdx int32  // index of the nearest mark below, -1 if none
	memoKey uint32 // its memo key, for rememo
	// weight is the number of opcodes that built the object, what a memo
	// reference to it costs (MaxOps); memo is 1 + the index of its memo
	// entry in guard.memoEnt, 0 if none, so that items added to it after
	// it was memoized raise the weight its references cost.
	weight int32
	memo   int32
}

// memoEntry is what the guard knows of a memoized object.
type memoEntry struct {
	kind   uint8
	weight int32
}

const (
	remNone uint8 = iota
	remBin        // LONG_BINPUT key
	remPut        // PUT key (protocol 0 style)
)

// appendRememo appends the opcode that stores s's list in the memo again.
func appendRememo(out []byte, s *slot) []byte {
	switch s.rememo {
	case remBin:
		out = append(out, 'r')
		return binary.LittleEndian.AppendUint32(out, s.memoKey)
	case remPut:
		out = append(out, 'p')
		out = strconv.AppendUint(out, uint64(s.memoKey), 10)
		return append(out, '\n')
	}
	return out
}

// Memo styles; a pickle uses MEMOIZE (protocol 4+) or PUT/BINPUT (before).
const (
	memoUnset uint8 = iota
	memoByCount
	memoByKey
)

type guard struct {
	src   *bufio.Reader
	off   int64 // bytes consumed from src
	size  int64 // input size when known, else -1
	limit int64 // Options.MaxBytes

	dropFrames bool

	out     []byte // bytes for og-rek not yet delivered
	outBuf  []byte
	payload int64 // data bytes of the current opcode still to pass on
	discard bool  // drop the payload instead of delivering it

	stack []slot

	memoStyle uint8
	memoN     int64            // memo entries made by MEMOIZE
	memoEnt   []memoEntry      // memoized objects: by MEMOIZE index, or as memoMap says
	memoMap   map[string]int32 // index in memoEnt of the keys of PUT/BINPUT/LONG_BINPUT

	// ops is the work so far against maxOps (MaxOps); text the bytes of
	// strings and text arguments against MaxText.
	ops, maxOps int64
	text        int64

	skipping bool // inside a "frames" value that is being dropped
	skipBase int  // stack index of that value
	dropped  int  // stack index of the last dropped value while it is there, else -1

	// lastStr is the previous opcode when it pushed a short binary
	// string, whole (opcode, length, data), so that a string memoized
	// inside a dropped "frames" value can still be given to og-rek: Python
	// memoizes every string once and refers to it with BINGET afterwards,
	// also from outside the frames (a frame's "" filename is the ""
	// PYTORCH_CUDA_ALLOC_CONF of the settings).
	lastStr   []byte
	lastStrOK bool

	opOff   int64 // offset of the current opcode
	opName  string
	started bool
	done    bool
	err     error
}

func newGuard(r *bufio.Reader, size, limit int64, dropFrames bool) *guard {
	return &guard{src: r, size: size, limit: limit, dropFrames: dropFrames, dropped: -1, outBuf: make([]byte, 0, 64)}
}

// Read implements io.Reader for og-rek. Each call returns bytes of one
// opcode at most, so og-rek's position is always within the opcode the
// guard reports in errors.
func (g *guard) Read(p []byte) (int, error) {
	for {
		if len(g.out) > 0 {
			n := copy(p, g.out)
			g.out = g.out[n:]
			return n, nil
		}
		if g.payload > 0 {
			if g.discard {
				n, err := g.src.Discard(int(min(g.payload, 1<<30)))
				g.off += int64(n)
				g.payload -= int64(n)
				if err != nil {
					return 0, g.fail(g.payloadErr(err))
				}
				continue
			}
			n := len(p)
			if int64(n) > g.payload {
				n = int(g.payload)
			}
			n, err := g.src.Read(p[:n])
			g.off += int64(n)
			g.payload -= int64(n)
			if n > 0 {
				return n, nil
			}
			if err != nil {
				return 0, g.fail(g.payloadErr(err))
			}
			continue
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.done {
			return 0, io.EOF
		}
		if err := g.step(); err != nil {
			return 0, g.fail(err)
		}
	}
}

func (g *guard) fail(err error) error {
	if g.err == nil {
		g.err = err
	}
	return g.err
}

// charge counts n opcodes of work (see MaxOps).
func (g *guard) charge(n int32) error {
	g.ops += int64(n)
	if g.ops > g.maxOps {
		return g.errorf("the pickle costs more than %d opcodes, counting each memo reference as the size of what it refers to (snapshot.MaxOps; shared references multiplied?)", g.maxOps)
	}
	return nil
}

// satAdd adds two non-negative weights, saturating at maxWeight: a
// weight past MaxOps is refused when referenced, so its exact value does
// not matter.
func satAdd(a, b int32) int32 {
	if a > maxWeight-b {
		return maxWeight
	}
	return a + b
}

// maxWeight is where weights saturate, above MaxOps.
const maxWeight = 1 << 30

// addText counts n bytes of string data or text argument against MaxText.
func (g *guard) addText(n int64) error {
	if n > MaxString {
		return g.errorf("a string or text argument of %d bytes, beyond the %d-byte limit (snapshot.MaxString)", n, MaxString)
	}
	g.text += n
	if g.text > MaxText {
		return g.errorf("more than %d bytes of strings (snapshot.MaxText)", MaxText)
	}
	return nil
}

func (g *guard) errorf(format string, args ...any) error {
	return &PickleError{Offset: g.opOff, Opcode: g.opName, Msg: fmt.Sprintf(format, args...)}
}

func (g *guard) payloadErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return g.errorf("truncated: input ends at offset %d with %d bytes of data still declared", g.off, g.payload)
	}
	return err
}

// remaining is how many more bytes the input can hold.
func (g *guard) remaining() int64 {
	if g.size >= 0 {
		return g.size - g.off
	}
	return g.limit - g.off
}

func (g *guard) readByte() (byte, error) {
	b, err := g.src.ReadByte()
	if err == nil {
		g.off++
	}
	return b, err
}

// readArg reads n argument bytes into g.out and returns them.
func (g *guard) readArg(n int) ([]byte, error) {
	start := len(g.out)
	for i := 0; i < n; i++ {
		b, err := g.readByte()
		if err != nil {
			if err == io.EOF {
				return nil, g.errorf("truncated: input ends at offset %d inside a %d-byte argument", g.off, n)
			}
			return nil, err
		}
		g.out = append(g.out, b)
	}
	return g.out[start:], nil
}

// readLine reads a '\n'-terminated argument of at most max bytes into
// g.out and returns it without the '\n'.
func (g *guard) readLine(max int) ([]byte, error) {
	start := len(g.out)
	for {
		b, err := g.readByte()
		if err != nil {
			if err == io.EOF {
				return nil, g.errorf("truncated: input ends at offset %d inside a text argument (expected a line ending in \\n)", g.off)
			}
			return nil, err
		}
		g.out = append(g.out, b)
		if b == '\n' {
			return g.out[start : len(g.out)-1], nil
		}
		if len(g.out)-start > max {
			return nil, g.errorf("text argument longer than %d bytes", max)
		}
	}
}

// step reads the next opcode with its arguments and prepares the bytes
// og-rek gets for it.
func (g *guard) step() error {
	if g.off > g.limit {
		return &PickleError{Offset: g.off, Msg: fmt.Sprintf("%d-byte limit reached", g.limit), Err: ErrTooLarge}
	}
	g.opOff, g.opName = g.off, ""
	op, err := g.readByte()
	if err != nil {
		if err == io.EOF {
			if !g.started {
				return g.errorf("empty input: expected a pickle (PROTO opcode 0x80)")
			}
			return g.errorf("truncated: input ends without the STOP opcode")
		}
		return err
	}
	info := &ops[op]
	if !g.started {
		if op != 0x80 {
			return g.errorf("not a pickle of protocol 2 or later: expected PROTO opcode 0x80 at offset 0, found %s", describeByte(op))
		}
		g.started = true
	}
	if info.name == "" {
		return g.errorf("unknown opcode %s", describeByte(op))
	}
	g.opName = info.name
	if info.unsupported {
		return g.errorf("unsupported opcode: the pickle decoder (og-rek) cannot read it, and a memory snapshot, being plain data, does not use it")
	}
	g.out = append(g.outBuf[:0], op)
	g.discard = false

	// Argument.
	var (
		arg      []byte
		declared int64 = -1
	)
	switch info.arg {
	case arg1:
		arg, err = g.readArg(1)
	case arg2:
		arg, err = g.readArg(2)
	case arg4:
		arg, err = g.readArg(4)
	case arg8:
		arg, err = g.readArg(8)
	case argLen1:
		if arg, err = g.readArg(1); err == nil {
			declared = int64(arg[0])
		}
	case argLen4:
		if arg, err = g.readArg(4); err == nil {
			declared = int64(binary.LittleEndian.Uint32(arg))
		}
	case argLen4Signed:
		if arg, err = g.readArg(4); err == nil {
			declared = int64(int32(binary.LittleEndian.Uint32(arg)))
			if declared < 0 {
				return g.errorf("negative length %d", declared)
			}
		}
	case argLen8:
		if arg, err = g.readArg(8); err == nil {
			u := binary.LittleEndian.Uint64(arg)
			if u > 1<<62 {
				return g.errorf("declares %d bytes of data", u)
			}
			declared = int64(u)
		}
	case argNumberLine:
		arg, err = g.readLine(maxNumberLine)
	case argKeyLine:
		arg, err = g.readLine(maxKeyLine)
	case argTextLine:
		arg, err = g.readLine(maxTextLine)
	case argTwoLines:
		var a, b []byte
		if a, err = g.readLine(maxTextLine); err == nil {
			b, err = g.readLine(maxTextLine)
		}
		arg = g.out[1 : 1+len(a)+len(b)]
	}
	if err != nil {
		return err
	}
	if declared < 0 && arg != nil && info.arg >= argNumberLine {
		if err := g.addText(int64(len(arg))); err != nil {
			return err
		}
	}
	if declared > g.remaining() {
		if g.size >= 0 {
			return g.errorf("declares %d bytes of data but only %d remain in the input (truncated or corrupt)", declared, g.remaining())
		}
		pe := g.errorf("declares %d bytes of data, beyond the %d-byte limit", declared, g.limit).(*PickleError)
		pe.Err = ErrTooLarge
		return pe
	}
	if declared >= 0 {
		if err := g.addText(declared); err != nil {
			return err
		}
	}

	// Kind of what a push or get puts on the stack.
	kind := info.kind
	isStr := false
	defer func() { g.lastStrOK = isStr }()
	if declared >= 0 && declared <= shortPayload {
		// Read short data now so that it can be inspected.
		data, err := g.readArg(int(declared))
		if err != nil {
			return err
		}
		if kind == kStr && string(data) == "frames" {
			kind = kStrFrames
		}
		if kind == kStr || kind == kStrFrames {
			g.lastStr = append(append(append(g.lastStr[:0], op), arg...), data...)
			isStr = true
		}
		declared = 0
	} else if declared > 0 {
		g.payload = declared
	}
	if kind == kStr && (op == 'S' && (string(arg) == `'frames'` || string(arg) == `"frames"`) || op == 'V' && string(arg) == "frames") {
		kind = kStrFrames
	}
	// Work: one opcode, or for a memo reference the size of what it
	// refers to (MaxOps), except as the value of a "frames" key, whose
	// shared stack is converted once.
	weight, memoRef := int32(1), int32(0)
	if info.eff == effGet {
		kind = kOther
		if idx := g.memoIndex(op, arg); idx >= 0 {
			kind, memoRef = g.memoEnt[idx].kind, idx+1
			if !g.atFramesValue() {
				weight = max(1, g.memoEnt[idx].weight)
			}
		}
	}
	if err := g.charge(weight); err != nil {
		return err
	}

	// Drop "frames" values: decide before the stack changes.
	deliver := true
	if g.skipping {
		if info.eff != effStop && g.belongs(op, info, kind) {
			deliver = false
		} else {
			g.skipping = false
			if g.skipBase < len(g.stack) {
				g.stack[g.skipBase].rememo = remNone
				g.dropped = g.skipBase
			}
		}
	}
	start := false
	if !g.skipping && g.dropFrames && g.atFramesValue() && (op == ']' || op == '(' || info.eff == effGet) {
		// A list, a MARK-built object or a shared (memoized) object
		// starts the value.
		g.skipping, g.skipBase, deliver, start = true, len(g.stack), false, true
	}
	if !deliver {
		g.out = g.out[:0]
		g.discard = true
		if start {
			g.out = append(g.out, 'N') // None takes the value's place
		}
	}
	err = g.apply(op, info, kind, arg, deliver, weight, memoRef)
	if g.dropped >= len(g.stack) {
		g.dropped = -1
	}
	g.outBuf = g.out[:0]
	return err
}

// apply updates the stack shape for op and appends any extra bytes og-rek
// needs. When deliver is false the opcode itself is not passed on.
func (g *guard) apply(op byte, info *opInfo, kind uint8, arg []byte, deliver bool, weight, memoRef int32) error {
	switch info.eff {
	case effMark:
		return g.push(kind, 0, 0)
	case effPush:
		return g.push(kind, 1, 0)
	case effGet:
		return g.push(kind, weight, memoRef)
	case effStop:
		if len(g.stack) == 0 {
			return g.errorf("STOP with an empty stack")
		}
		if g.stack[len(g.stack)-1].kind == kMark {
			return g.errorf("STOP with a MARK on top of the stack")
		}
		g.done = true
	case effPop:
		if len(g.stack) == 0 {
			return g.errorf("stack underflow")
		}
		g.stack = g.stack[:len(g.stack)-1]
	case effDup:
		if len(g.stack) == 0 {
			return g.errorf("stack underflow")
		}
		// DUP is one more reference to the top object.
		top := g.stack[len(g.stack)-1]
		if err := g.charge(top.weight); err != nil {
			return err
		}
		return g.push(top.kind, top.weight, top.memo)
	case effPopPush:
		if len(g.stack) < info.n {
			return g.errorf("stack underflow: needs %d items", info.n)
		}
		for _, s := range g.stack[len(g.stack)-info.n:] {
			if s.kind == kMark {
				return g.errorf("MARK among the %d items it takes", info.n)
			}
		}
		w := 1 + weightOf(g.stack[len(g.stack)-info.n:])
		g.stack = g.stack[:len(g.stack)-info.n]
		return g.push(kind, w, 0)
	case effPopMarkPush:
		m, err := g.topMark()
		if err != nil {
			return err
		}
		w := 1 + weightOf(g.stack[m+1:])
		g.stack = g.stack[:m]
		return g.push(kind, w, 0)
	case effAppend:
		if len(g.stack) < 2 {
			return g.errorf("stack underflow: needs a list and an item")
		}
		if g.stack[len(g.stack)-1].kind == kMark {
			return g.errorf("MARK as the item to append")
		}
		g.grow(len(g.stack)-2, g.stack[len(g.stack)-1:])
		g.stack = g.stack[:len(g.stack)-1]
		if len(g.stack)-1 == g.dropped {
			return g.errorf("a \"frames\" list holds an item that is not a frame dict")
		}
		if deliver {
			g.out = appendRememo(g.out, &g.stack[len(g.stack)-1])
		}
	case effAppends:
		m, err := g.topMark()
		if err != nil {
			return err
		}
		if m < 1 {
			return g.errorf("no list below the MARK")
		}
		g.grow(m-1, g.stack[m+1:])
		g.stack = g.stack[:m]
		if m-1 == g.dropped {
			return g.errorf("a \"frames\" list holds an item that is not a frame dict")
		}
		if deliver {
			g.out = appendRememo(g.out, &g.stack[m-1])
		}
	case effSetitem:
		if len(g.stack) < 3 {
			return g.errorf("stack underflow: needs a dict, a key and a value")
		}
		g.grow(len(g.stack)-3, g.stack[len(g.stack)-2:])
		g.stack = g.stack[:len(g.stack)-2]
	case effSetitems:
		m, err := g.topMark()
		if err != nil {
			return err
		}
		if m < 1 {
			return g.errorf("no dict below the MARK")
		}
		g.grow(m-1, g.stack[m+1:])
		g.stack = g.stack[:m]
	case effMemo:
		return g.memo(op, arg, deliver)
	case effProto:
		if arg[0] < 2 || arg[0] > 5 {
			return g.errorf("protocol %d: expected 2 to 5", arg[0])
		}
	case effFrame:
		// FRAME announces the size of the next frame (PEP 3154); og-rek
		// ignores it, and so can we once it is plausible.
		n := binary.LittleEndian.Uint64(arg)
		if n > uint64(g.remaining()) {
			if g.size < 0 {
				pe := g.errorf("frame of %d bytes, beyond the %d-byte limit", n, g.limit).(*PickleError)
				pe.Err = ErrTooLarge
				return pe
			}
			return g.errorf("frame of %d bytes but only %d remain in the input (truncated or corrupt)", n, g.remaining())
		}
	}
	return nil
}

// weightOf sums the weights of stack slots.
func weightOf(items []slot) int32 {
	var w int32
	for i := range items {
		w = satAdd(w, items[i].weight)
	}
	return w
}

// grow adds items to the container at stack index c (APPEND, SETITEM and
// their batches), and to its memo entry, so that later references to it
// cost what it holds.
func (g *guard) grow(c int, items []slot) {
	s := &g.stack[c]
	s.weight = satAdd(s.weight, weightOf(items))
	if s.memo > 0 {
		g.memoEnt[s.memo-1].weight = s.weight
	}
}

func (g *guard) push(kind uint8, weight, memo int32) error {
	if len(g.stack) >= maxStack {
		return g.errorf("stack deeper than %d items", maxStack)
	}
	mark := int32(-1)
	if n := len(g.stack); n > 0 {
		if g.stack[n-1].kind == kMark {
			mark = int32(n - 1)
		} else {
			mark = g.stack[n-1].markIdx
		}
	}
	g.stack = append(g.stack, slot{kind: kind, markIdx: mark, weight: weight, memo: memo})
	return nil
}

// topMark returns the index of the topmost mark.
func (g *guard) topMark() (int, error) {
	n := len(g.stack)
	if n == 0 {
		return 0, g.errorf("no MARK on the stack")
	}
	if g.stack[n-1].kind == kMark {
		return n - 1, nil
	}
	if m := g.stack[n-1].markIdx; m >= 0 {
		return int(m), nil
	}
	return 0, g.errorf("no MARK on the stack")
}

// memo handles MEMOIZE, PUT, BINPUT and LONG_BINPUT.
func (g *guard) memo(op byte, arg []byte, deliver bool) error {
	n := len(g.stack)
	if n == 0 || g.stack[n-1].kind == kMark {
		return g.errorf("nothing to memoize")
	}
	top := &g.stack[n-1]
	style := memoByKey
	if op == 0x94 {
		style = memoByCount
	}
	if g.memoStyle == memoUnset {
		g.memoStyle = style
		if style == memoByKey {
			g.memoMap = make(map[string]int32)
		}
	} else if g.memoStyle != style {
		// og-rek numbers MEMOIZE entries by the memo's size, which is only
		// Python's number when the two styles are not mixed; Python never
		// mixes them.
		return g.errorf("mixes MEMOIZE with PUT opcodes")
	}
	rem, key := remBin, uint32(0)
	if len(g.memoEnt) >= 1<<31-1 {
		return g.errorf("too many memo entries")
	}
	idx := int32(len(g.memoEnt))
	g.memoEnt = append(g.memoEnt, memoEntry{kind: top.kind, weight: top.weight})
	top.memo = idx + 1
	switch op {
	case 0x94: // MEMOIZE: the key is the number of entries so far
		key = uint32(g.memoN)
		g.memoN++
	case 'q': // BINPUT
		key = uint32(arg[0])
		g.memoMap[strconv.Itoa(int(arg[0]))] = idx
	case 'r': // LONG_BINPUT
		key = binary.LittleEndian.Uint32(arg)
		g.memoMap[strconv.FormatUint(uint64(key), 10)] = idx
	case 'p': // PUT: og-rek keys the memo by the line as written
		g.memoMap[string(arg)] = idx
		v, err := strconv.ParseUint(string(arg), 10, 32)
		if err == nil && strconv.FormatUint(v, 10) == string(arg) {
			rem, key = remPut, uint32(v)
		} else {
			rem = remNone // not a key Python writes; such a list is not fixed
		}
	}
	if !deliver {
		// The value is not passed on; give its memo key a None so that
		// og-rek's numbering stays Python's.
		s := slot{rememo: rem, memoKey: key}
		if op == 'p' {
			s.rememo = remNone
		}
		g.out = append(g.out[:0], 'N')
		if (top.kind == kStr || top.kind == kStrFrames) && g.lastStrOK {
			// a string: memoize the string itself, which later GETs
			// outside the frames may read
			g.out = append(g.out[:0], g.lastStr...)
		}
		if op == 'p' {
			g.out = append(g.out, 'p')
			g.out = append(g.out, arg...)
			g.out = append(g.out, '\n')
		} else {
			g.out = appendRememo(g.out, &s)
		}
		g.out = append(g.out, '0')
		return nil
	}
	if top.kind == kList {
		top.rememo, top.memoKey = rem, key
	}
	return nil
}

// memoIndex returns the index in memoEnt of the object stored under the
// key of a GET opcode, -1 if none.
func (g *guard) memoIndex(op byte, arg []byte) int32 {
	var key string
	var idx uint64
	switch op {
	case 'h':
		idx = uint64(arg[0])
		key = strconv.FormatUint(idx, 10)
	case 'j':
		idx = uint64(binary.LittleEndian.Uint32(arg))
		key = strconv.FormatUint(idx, 10)
	default:
		key = string(arg)
		v, err := strconv.ParseUint(key, 10, 32)
		if err != nil || strconv.FormatUint(v, 10) != key {
			idx = 1 << 63
		} else {
			idx = v
		}
	}
	switch g.memoStyle {
	case memoByCount:
		if idx < uint64(len(g.memoEnt)) {
			return int32(idx)
		}
	case memoByKey:
		if i, ok := g.memoMap[key]; ok {
			return i
		}
	}
	return -1
}

// atFramesValue reports whether the top of the stack is the key "frames"
// of a dict being built, so that the next object is its value. A key is at
// an odd position above the MARK of SETITEMS, or directly above the dict
// for SETITEM.
func (g *guard) atFramesValue() bool {
	t := len(g.stack) - 1
	if t < 1 || g.stack[t].kind != kStrFrames {
		return false
	}
	if g.stack[t-1].kind == kDict {
		return true
	}
	m := int(g.stack[t].markIdx)
	return m >= 1 && g.stack[m-1].kind == kDict && (t-m)%2 == 1
}

// belongs reports whether op, met while a "frames" value is being dropped,
// is still part of that value. The value sits at skipBase. Anything above
// it is inside it; with the value alone on top, memo opcodes and, for a
// list, the items Python appends to it (a MARK starting a batch, or a
// non-string object: frames are dicts, while the next key is a string)
// belong to it too.
func (g *guard) belongs(op byte, info *opInfo, kind uint8) bool {
	v := g.skipBase
	d := len(g.stack)
	switch {
	case d <= v:
		return false
	case g.stack[v].kind == kMark || d > v+1:
		return true
	case info.eff == effMemo:
		return true
	case g.stack[v].kind != kList:
		return false
	case op == '(':
		return true
	case info.eff == effPush || info.eff == effGet:
		return kind != kStr && kind != kStrFrames
	}
	return false
}

func describeByte(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return fmt.Sprintf("0x%02x (%q)", b, rune(b))
	}
	return fmt.Sprintf("0x%02x", b)
}
