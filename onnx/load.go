package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// Limits on what Load and Parse accept.
const (
	// MaxFileSize is the largest file Load reads (ONNX files with inline
	// weights are protobufs, themselves limited to 2 GiB).
	MaxFileSize = 2 << 30
	// maxElements refuses tensors that declare more elements than any
	// real model has (2^40, four tebi-elements).
	maxElements = 1 << 40
	maxRank     = 16
	// MaxNodes is the most nodes a graph may have. Import is linear in
	// the graph's size, about 4 KB of allocations and a few microseconds a
	// node (BenchmarkLoadScaling), so a graph at the limit takes seconds
	// and a few GB; the largest exported language models have tens of
	// thousands of nodes.
	MaxNodes = 1 << 20
	// maxConstElements is the size up to which constant data is decoded
	// (shape vectors, scalars, position ids); larger constants keep only
	// their shape.
	maxConstElements = 1 << 16
	// maxOpset is the newest default-domain opset whose operator versions
	// the reader follows: Gelu (opset 20) is the newest operator it reads,
	// and an op's meaning may change in a later opset (as Pad's did in 18),
	// so a file from a newer opset is refused rather than read with the
	// older rules.
	maxOpset = 20
)

// maxNodes is MaxNodes, lowered by tests.
var maxNodes = MaxNodes

// Load reads an ONNX model file. It reads the protobuf, never the external
// data files that initializers may point to: batchfit needs only the
// weights' shapes and types.
func Load(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading ONNX model: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading ONNX model %s: %w", path, err)
	}
	if info.IsDir() {
		return nil, fmt.Errorf("reading ONNX model %s: is a directory, expected an .onnx file", path)
	}
	if info.Size() > MaxFileSize {
		return nil, fmt.Errorf("reading ONNX model %s: %d bytes, more than the %d-byte limit of an ONNX protobuf (store the weights as external data)", path, info.Size(), int64(MaxFileSize))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading ONNX model %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("reading ONNX model %s: more than %d bytes", path, int64(MaxFileSize))
	}
	m, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Parse reads an ONNX model from its serialized ModelProto. name is used in
// error messages and, without directory and extension, as the model's name.
func Parse(data []byte, name string) (*Model, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("reading ONNX model %s: %d bytes, more than the %d-byte limit", name, len(data), int64(MaxFileSize))
	}
	var mp onnxpb.ModelProto
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("reading ONNX model %s: not an ONNX ModelProto (truncated or not protobuf): %v", name, err)
	}
	return fromProto(&mp, name)
}

func fromProto(mp *onnxpb.ModelProto, name string) (*Model, error) {
	g := mp.GetGraph()
	if g == nil {
		return nil, fmt.Errorf("reading ONNX model %s: no graph; expected an ONNX ModelProto (is this an .onnx file?)", name)
	}
	if mp.GetIrVersion() <= 0 {
		return nil, fmt.Errorf("reading ONNX model %s: no ir_version; expected an ONNX ModelProto", name)
	}
	opset := int64(-1)
	for _, o := range mp.GetOpsetImport() {
		if d := o.GetDomain(); d == "" || d == "ai.onnx" {
			opset = o.GetVersion()
		}
	}
	if opset < 0 {
		return nil, fmt.Errorf("reading ONNX model %s: no opset_import for the default ONNX domain; expected an ONNX ModelProto", name)
	}
	if opset < 1 {
		return nil, fmt.Errorf("reading ONNX model %s: opset %d out of range; ONNX opsets start at 1", name, opset)
	}
	if opset > maxOpset {
		return nil, fmt.Errorf("reading ONNX model %s: opset %d is newer than opset %d, the newest batchfit reads; export with opset_version=%d or lower", name, opset, maxOpset, maxOpset)
	}
	if n := len(g.GetNode()); n > maxNodes {
		return nil, fmt.Errorf("reading ONNX model %s: %d nodes, more than the limit of %d", name, n, maxNodes)
	}
	base := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	m := &Model{name: base, path: name, IRVersion: mp.GetIrVersion(), Opset: opset,
		Producer: strings.TrimSpace(mp.GetProducerName() + " " + mp.GetProducerVersion())}
	if err := convert(m, g); err != nil {
		return nil, fmt.Errorf("reading ONNX model %s: %w", name, err)
	}
	return m, nil
}

// tensorInfo is what batchfit keeps of a TensorProto: its shape and type,
// and its data when small.
type tensorInfo struct {
	name     string
	dims     []int64
	elem     int32
	numel    int64
	external bool
	// hasData: the values are in the file (inline). ints or floats hold
	// them when the tensor is small enough to decode.
	hasData bool
	ints    []int64
	floats  []float64
	decoded bool
}

var errNoData = errors.New("no data")

// The float8 types of ONNX 1.14 (IR 9), newer than the onnx.proto the
// bindings are generated from.
const (
	elemFloat8E4M3FN   onnxpb.TensorProto_DataType = 17
	elemFloat8E4M3FNUZ onnxpb.TensorProto_DataType = 18
	elemFloat8E5M2     onnxpb.TensorProto_DataType = 19
	elemFloat8E5M2FNUZ onnxpb.TensorProto_DataType = 20
)

// onnxDType maps ONNX TensorProto.DataType to graph dtypes.
func onnxDType(elem int32) (graph.DType, bool) {
	switch onnxpb.TensorProto_DataType(elem) {
	case onnxpb.TensorProto_FLOAT:
		return graph.F32, true
	case onnxpb.TensorProto_FLOAT16:
		return graph.F16, true
	case onnxpb.TensorProto_BFLOAT16:
		return graph.BF16, true
	case onnxpb.TensorProto_DOUBLE:
		return graph.F64, true
	case onnxpb.TensorProto_INT64:
		return graph.I64, true
	case onnxpb.TensorProto_INT32:
		return graph.I32, true
	case onnxpb.TensorProto_INT8:
		return graph.I8, true
	case onnxpb.TensorProto_UINT8:
		return graph.U8, true
	case onnxpb.TensorProto_BOOL:
		return graph.Bool, true
	case elemFloat8E4M3FN:
		return graph.F8E4M3, true
	case elemFloat8E5M2:
		return graph.F8E5M2, true
	}
	return 0, false
}

func elemName(elem int32) string {
	if s, ok := onnxpb.TensorProto_DataType_name[elem]; ok {
		return strings.ToLower(s)
	}
	return fmt.Sprintf("type %d", elem)
}

func isFloatElem(elem int32) bool {
	dt, ok := onnxDType(elem)
	return ok && dt.IsFloat()
}

// elemSize is the byte size of one element in raw_data, 0 for types
// without a fixed size.
func elemSize(elem int32) int64 {
	switch onnxpb.TensorProto_DataType(elem) {
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32:
		return 4
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64, onnxpb.TensorProto_COMPLEX64:
		return 8
	case onnxpb.TensorProto_COMPLEX128:
		return 16
	case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16, onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16:
		return 2
	case onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL,
		elemFloat8E4M3FN, elemFloat8E4M3FNUZ, elemFloat8E5M2, elemFloat8E5M2FNUZ:
		return 1
	}
	return 0
}

// readTensor checks a TensorProto's declared shape against the limits and
// its inline data against the shape, and decodes small data.
func readTensor(t *onnxpb.TensorProto, what string) (*tensorInfo, error) {
	if t == nil {
		// an attribute of type TENSOR that carries none
		return nil, fmt.Errorf("%s: no tensor", what)
	}
	ti := &tensorInfo{name: t.GetName(), dims: t.GetDims(), elem: t.GetDataType()}
	if len(ti.dims) > maxRank {
		return nil, fmt.Errorf("%s: rank %d (more than %d dimensions)", what, len(ti.dims), maxRank)
	}
	n := int64(1)
	for _, d := range ti.dims {
		if d < 0 {
			return nil, fmt.Errorf("%s: negative dimension in %v", what, ti.dims)
		}
		var ok bool
		if n, ok = mulInt(n, d); !ok || n > maxElements {
			return nil, fmt.Errorf("%s: declared shape %v has more than %d elements", what, ti.dims, int64(maxElements))
		}
	}
	ti.numel = n
	if t.GetSegment() != nil {
		return nil, fmt.Errorf("%s: segmented tensors are not supported", what)
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		// External data: the shape and type are all batchfit needs; the
		// file named by "location" is never opened.
		ti.external = true
		return ti, nil
	}
	size := elemSize(ti.elem)
	raw := t.GetRawData()
	count := int64(-1)
	if len(raw) > 0 || t.RawData != nil {
		if size == 0 {
			return nil, fmt.Errorf("%s: raw data of %s", what, elemName(ti.elem))
		}
		if int64(len(raw)) != n*size {
			return nil, fmt.Errorf("%s: %d bytes of raw data for shape %v of %s (want %d): truncated or corrupt", what, len(raw), ti.dims, elemName(ti.elem), n*size)
		}
		count = n
	} else if c := typedCount(t); c >= 0 {
		count = c
	}
	switch {
	case count < 0 && n == 0:
		ti.hasData = true // an empty tensor needs no data
	case count < 0:
		// No data at all: a weight stripped from the file. Only its shape
		// and type matter.
	case count != n:
		return nil, fmt.Errorf("%s: %d values for shape %v (want %d): truncated or corrupt", what, count, ti.dims, n)
	default:
		ti.hasData = true
	}
	if ti.hasData && n <= maxConstElements {
		if err := ti.decode(t); err == nil {
			ti.decoded = true
		}
	}
	return ti, nil
}

// typedCount is the number of values in the typed field that holds
// tensors of t's type (float_data for FLOAT, int32_data for the small
// integer and 16-bit float types, ...), -1 when that field is empty.
func typedCount(t *onnxpb.TensorProto) int64 {
	var c int
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_FLOAT:
		c = len(t.GetFloatData())
	case onnxpb.TensorProto_COMPLEX64:
		c = len(t.GetFloatData()) / 2
	case onnxpb.TensorProto_INT64:
		c = len(t.GetInt64Data())
	case onnxpb.TensorProto_DOUBLE:
		c = len(t.GetDoubleData())
	case onnxpb.TensorProto_COMPLEX128:
		c = len(t.GetDoubleData()) / 2
	case onnxpb.TensorProto_UINT32, onnxpb.TensorProto_UINT64:
		c = len(t.GetUint64Data())
	case onnxpb.TensorProto_STRING:
		c = len(t.GetStringData())
	default:
		c = len(t.GetInt32Data())
	}
	if c == 0 {
		return -1
	}
	return int64(c)
}

// decode fills ints (integer and bool types) or floats (floating types).
func (ti *tensorInfo) decode(t *onnxpb.TensorProto) error {
	raw := t.GetRawData()
	n := int(ti.numel)
	le := binary.LittleEndian
	switch onnxpb.TensorProto_DataType(ti.elem) {
	case onnxpb.TensorProto_INT64:
		ti.ints = make([]int64, n)
		for i := range ti.ints {
			if raw != nil && len(raw) > 0 {
				ti.ints[i] = int64(le.Uint64(raw[8*i:]))
			} else {
				ti.ints[i] = t.GetInt64Data()[i]
			}
		}
	case onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16, onnxpb.TensorProto_INT8,
		onnxpb.TensorProto_UINT16, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL:
		size := int(elemSize(ti.elem))
		ti.ints = make([]int64, n)
		for i := range ti.ints {
			if len(raw) > 0 {
				b := raw[size*i:]
				switch onnxpb.TensorProto_DataType(ti.elem) {
				case onnxpb.TensorProto_INT32:
					ti.ints[i] = int64(int32(le.Uint32(b)))
				case onnxpb.TensorProto_INT16:
					ti.ints[i] = int64(int16(le.Uint16(b)))
				case onnxpb.TensorProto_UINT16:
					ti.ints[i] = int64(le.Uint16(b))
				case onnxpb.TensorProto_INT8:
					ti.ints[i] = int64(int8(b[0]))
				default:
					ti.ints[i] = int64(b[0])
				}
			} else {
				ti.ints[i] = int64(t.GetInt32Data()[i])
			}
		}
	case onnxpb.TensorProto_FLOAT:
		ti.floats = make([]float64, n)
		for i := range ti.floats {
			if len(raw) > 0 {
				ti.floats[i] = float64(math.Float32frombits(le.Uint32(raw[4*i:])))
			} else {
				ti.floats[i] = float64(t.GetFloatData()[i])
			}
		}
	case onnxpb.TensorProto_DOUBLE:
		ti.floats = make([]float64, n)
		for i := range ti.floats {
			if len(raw) > 0 {
				ti.floats[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
			} else {
				ti.floats[i] = t.GetDoubleData()[i]
			}
		}
	case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
		ti.floats = make([]float64, n)
		for i := range ti.floats {
			var bits uint16
			if len(raw) > 0 {
				bits = le.Uint16(raw[2*i:])
			} else {
				bits = uint16(t.GetInt32Data()[i])
			}
			if onnxpb.TensorProto_DataType(ti.elem) == onnxpb.TensorProto_BFLOAT16 {
				ti.floats[i] = float64(math.Float32frombits(uint32(bits) << 16))
			} else {
				ti.floats[i] = halfToFloat(bits)
			}
		}
	default:
		return errNoData
	}
	return nil
}

func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}
