package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// maxInputBytes is the decompression allowance: the most bytes of JSON
// Read takes in, plain or after gunzip. It is what the limits admit: at
// most graph.MaxOps ops, and a recorded op costs its own record plus those
// of the tensors it makes. The files in testdata/capture spend 780 to 830
// bytes an op on both together (densenet201: 895,970 bytes for 1,116 ops;
// resnet152: 590,864 for 828), so 1 KiB an op at the op bound, 65,536 ×
// 1 KiB = 64 MiB, holds every graph batchfit can simulate; a larger
// input is refused as it is read, before it costs memory.
const maxInputBytes = graph.MaxOps << 10

// maxModules bounds the modules a file lists: one record per module of
// the nn.Module tree, each of which runs at least one op to matter, so no
// more than the ops.
const maxModules = graph.MaxOps

// readFile decodes the JSON document from r as it arrives, token by
// token, counting the ops, tensors, modules and custom calls as each one
// is decoded, so that a file of too many records is refused at the first
// one past the limit, not after all of them are held in memory. Data after
// the document (a second document, garbage) is refused.
func readFile(name string, r io.Reader) (*file, error) {
	lr := &limitedReader{r: r, n: maxInputBytes}
	tr := &tailReader{r: lr}
	dec := json.NewDecoder(tr)
	f, err := decodeFile(dec)
	if lr.over {
		return nil, fmt.Errorf("capture: %s: more than %d MiB of JSON (uncompressed); not a graph file batchfit wrote (at most %d ops)", name, maxInputBytes>>20, graph.MaxOps)
	}
	if err != nil {
		var re *recordError
		if errors.As(err, &re) {
			return nil, fmt.Errorf("capture: %s: %w", name, err)
		}
		return nil, fmt.Errorf("capture: %s: %s", name, tr.jsonError(err, dec.InputOffset()))
	}
	return f, nil
}

// recordError is a refusal of the document's content (a count, a field),
// as opposed to its JSON syntax.
type recordError struct{ msg string }

func (e *recordError) Error() string { return e.msg }

func recordf(format string, args ...any) error {
	return &recordError{fmt.Sprintf(format, args...)}
}

func decodeFile(dec *json.Decoder) (*file, error) {
	var f file
	if err := delim(dec, '{'); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, recordf("field %q given twice", key)
		}
		seen[key] = true
		switch key {
		case "tensors":
			err = decodeArray(dec, key, MaxTensors, &f.Tensors, func(i int, t *tensor) error {
				if t.ID != i {
					return recordf("tensors[%d]: id %d, want %d (ids are positions)", i, t.ID, i)
				}
				return nil
			})
		case "ops":
			err = decodeArray(dec, key, graph.MaxOps, &f.Ops, func(i int, o *op) error {
				if err := checkAten(o.Aten); err != nil {
					return recordf("op %d: %v", i, err)
				}
				if err := splitOverload(o); err != nil {
					return recordf("op %d: %v", i, err)
				}
				return nil
			})
		case "modules":
			err = decodeArray(dec, key, maxModules, &f.Modules, nil)
		case "custom_calls":
			err = decodeArray(dec, key, graph.MaxOps, &f.CustomCalls, nil)
		case "calls":
			err = decodeArray(dec, key, graph.MaxOps, &f.Calls, nil)
		case "format":
			err = dec.Decode(&f.Format)
		case "version":
			err = dec.Decode(&f.Version)
		case "producer":
			err = dec.Decode(&f.Producer)
		case "name":
			err = dec.Decode(&f.Name)
		case "factory":
			err = dec.Decode(&f.Factory)
		case "batch":
			err = dec.Decode(&f.Batch)
		case "loss":
			err = dec.Decode(&f.Loss)
		case "outputs":
			err = dec.Decode(&f.Outputs)
		case "backward":
			err = dec.Decode(&f.Backward)
		default:
			// a field a later capture may add: skipped
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field == "" {
				te.Field = key
			}
			return nil, err
		}
	}
	if err := delim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, recordf("data after the graph's JSON document (byte %d): a graph file is one JSON object", dec.InputOffset())
	}
	return &f, nil
}

// decodeArray decodes a JSON array (or null) into *dst element by
// element, refusing the element past max before decoding it. Elements
// are decoded in place into chunks of a fixed length and copied once into
// a slice of the exact length at the end: append's growth (by 1.25 past a
// few hundred elements) would allocate about five times the records' size
// in all, the chunks and the copy twice.
func decodeArray[T any](dec *json.Decoder, key string, max int, dst *[]T, check func(int, *T) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &json.UnmarshalTypeError{Value: fmt.Sprint(tok), Type: typeOf[[]T](), Field: key, Offset: dec.InputOffset()}
	}
	const chunk = 1024
	var chunks [][]T
	n := 0
	for dec.More() {
		if n >= max {
			return recordf("more than %d %s: more than batchfit reads", max, strings.ReplaceAll(key, "_", " "))
		}
		if n%chunk == 0 {
			chunks = append(chunks, make([]T, 0, chunk))
		}
		c := &chunks[len(chunks)-1]
		*c = (*c)[:len(*c)+1]
		v := &(*c)[len(*c)-1]
		if err := dec.Decode(v); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Field = fmt.Sprintf("%s[%d].%s", key, n, te.Field)
			}
			return err
		}
		if check != nil {
			if err := check(n, v); err != nil {
				return err
			}
		}
		n++
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	*dst = make([]T, 0, n)
	for _, c := range chunks {
		*dst = append(*dst, c...)
	}
	return nil
}

func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", string(want), tok)
	}
	return nil
}

// checkAten refuses an op name that is not an operator's qualified name,
// namespace::name[.overload] (aten::addmm, aten::add.Tensor; a custom
// op's mylib::fused): the capture writes torch's schema name
// (FunctionSchema.name) of whatever op ran, so any operator of any
// PyTorch release may appear. The ones batchfit has no rule for are
// refused where their result matters (an op on tensors that require grad:
// "has no rule in batchfit") and otherwise mapped by a default the
// prediction names (UnknownOps).
func checkAten(s string) error {
	ns, name, ok := strings.Cut(s, "::")
	if s == "" {
		return errors.New("no aten name")
	}
	name, overload, dotted := strings.Cut(name, ".")
	if !ok || !ident(ns) || !ident(name) || dotted && !ident(overload) {
		return fmt.Errorf("aten %q: not an operator's name (want namespace::name[.overload], such as aten::addmm or aten::add.Tensor)", clip(s))
	}
	return nil
}

// splitOverload moves an overload written in the op's name
// (aten::add.Tensor, torch's OpOverload spelling) to its overload field,
// where the rules look for it; both must agree when both are given.
func splitOverload(o *op) error {
	name, overload, ok := strings.Cut(o.Aten, ".")
	if !ok {
		return nil
	}
	if o.Overload != "" && o.Overload != overload {
		return fmt.Errorf("aten %q: overload %q in the name, %q in the overload field", clip(o.Aten), clip(overload), clip(o.Overload))
	}
	o.Aten, o.Overload = name, overload
	return nil
}

func ident(s string) bool {
	if s == "" || len(s) > 256 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// clip shortens a string from the file for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func typeOf[T any]() reflect.Type { return reflect.TypeOf((*T)(nil)).Elem() }

// limitedReader is io.LimitReader that remembers whether the input went
// past its allowance.
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// one byte more tells a file of exactly the allowance from a
		// larger one
		var one [1]byte
		if k, _ := io.ReadFull(l.r, one[:]); k > 0 {
			l.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}

// tailReader keeps the last bytes read (at least tailKeep of them) and
// counts the newlines before them, so that a JSON error's byte offset,
// which falls in what the decoder has just read, can be told as a line.
type tailReader struct {
	r     io.Reader
	base  int64 // offset of tail[0]
	lines int   // newlines before base
	tail  []byte
}

const tailKeep = 64 << 10

func (t *tailReader) Read(p []byte) (int, error) {
	k, err := t.r.Read(p)
	t.tail = append(t.tail, p[:k]...)
	if len(t.tail) > 2*tailKeep {
		drop := len(t.tail) - tailKeep
		t.lines += bytes.Count(t.tail[:drop], []byte("\n"))
		t.base += int64(drop)
		t.tail = append(t.tail[:0], t.tail[drop:]...)
	}
	return k, err
}

// line is the 1-based line of byte offset off, or 0 if it is no longer
// held.
func (t *tailReader) line(off int64) int {
	if off < t.base {
		return 0
	}
	i := off - t.base
	if i > int64(len(t.tail)) {
		i = int64(len(t.tail))
	}
	return t.lines + bytes.Count(t.tail[:i], []byte("\n")) + 1
}

// jsonError names the place of a JSON error: line (or byte) and field.
func (t *tailReader) jsonError(err error, at int64) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	where := func(off int64) string {
		if l := t.line(off); l > 0 {
			return fmt.Sprintf("line %d", l)
		}
		return fmt.Sprintf("byte %d", off)
	}
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("malformed (%s): field %q: want %s, got JSON %s", where(te.Offset), te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at %s: %v", where(se.Offset), err)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Sprintf("malformed JSON: unexpected end of the file (%s)", where(at))
	}
	return fmt.Sprintf("malformed JSON at %s: %v", where(at), err)
}

// checkArity refuses an op with fewer arguments than the rule that maps
// it reads (aten.go's aten): each of these ops' schemas has at least that
// many positional arguments, and the capture writes all of them (the
// dispatcher hands an op every argument of its schema, defaults filled).
func checkArity(o *op) error {
	name := strings.TrimPrefix(o.Aten, "aten::")
	if want, ok := minArgs[name]; ok && len(o.Args) < want {
		return fmt.Errorf("%d arguments: the op takes at least %d", len(o.Args), want)
	}
	return nil
}

// minArgs is, for each op aten.go maps by position, the least number of
// positional arguments its schema (native_functions.yaml) has.
var minArgs = map[string]int{
	"convolution":                         9,
	"_convolution":                        9,
	"native_batch_norm":                   3,
	"_native_batch_norm_legit":            3,
	"_batch_norm_with_update":             3,
	"cudnn_batch_norm":                    3,
	"_native_batch_norm_legit_functional": 3,
	"native_layer_norm":                   2,
	"_softmax":                            2,
	"_log_softmax":                        2,
	"native_dropout":                      2,
	"gather":                              3,
	"constant_pad_nd":                     2,
	"roll":                                3,
	"cat":                                 1,
	"stack":                               1,
	"embedding":                           2,
	"masked_fill":                         2,
}
