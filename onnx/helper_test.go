package onnx_test

import (
	"encoding/binary"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// mb builds small ONNX models in tests, the way PyTorch writes them.
type mb struct {
	m *onnxpb.ModelProto
	g *onnxpb.GraphProto
}

const (
	tFloat = int32(onnxpb.TensorProto_FLOAT)
	tInt64 = int32(onnxpb.TensorProto_INT64)
)

func newModel(opset int64) *mb {
	g := &onnxpb.GraphProto{Name: proto.String("test")}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), ProducerName: proto.String("test"), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}}}
	return &mb{m: m, g: g}
}

func valueInfo(name string, elem int32, dims ...any) *onnxpb.ValueInfoProto {
	var ds []*onnxpb.TensorShapeProto_Dimension
	for _, d := range dims {
		switch x := d.(type) {
		case string:
			ds = append(ds, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: x}})
		case int:
			ds = append(ds, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(x)}})
		case int64:
			ds = append(ds, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: x}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(elem), Shape: &onnxpb.TensorShapeProto{Dim: ds}}}}}
}

// input declares a graph input; dims are ints or dim_param strings.
func (b *mb) input(name string, elem int32, dims ...any) *mb {
	b.g.Input = append(b.g.Input, valueInfo(name, elem, dims...))
	return b
}

func (b *mb) output(name string) *mb {
	b.g.Output = append(b.g.Output, &onnxpb.ValueInfoProto{Name: proto.String(name)})
	return b
}

// weight adds a float initializer whose data was stripped (dims only).
func (b *mb) weight(name string, dims ...int64) *mb {
	b.g.Initializer = append(b.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(tFloat)})
	return b
}

// ints adds an inline int64 initializer.
func (b *mb) ints(name string, vals []int64, dims ...int64) *mb {
	b.g.Initializer = append(b.g.Initializer, intTensor(name, vals, dims...))
	return b
}

func intTensor(name string, vals []int64, dims ...int64) *onnxpb.TensorProto {
	raw := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(tInt64), RawData: raw}
}

func floatTensor(name string, vals []float32, dims ...int64) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(tFloat), RawData: raw}
}

// constant adds a Constant node with a scalar float.
func (b *mb) constant(out string, v float32) *mb {
	return b.node("Constant", "", nil, []string{out}, aTensor("value", floatTensor("", []float32{v})))
}

// constInts adds a Constant node with an int64 vector.
func (b *mb) constInts(out string, vals ...int64) *mb {
	return b.node("Constant", "", nil, []string{out}, aTensor("value", intTensor("", vals, int64(len(vals)))))
}

func (b *mb) node(op, name string, in, out []string, attrs ...*onnxpb.AttributeProto) *mb {
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: in, Output: out, Attribute: attrs})
	return b
}

func (b *mb) bytes(t testing.TB) []byte {
	t.Helper()
	data, err := proto.Marshal(b.m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func aString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func ins(names ...string) []string { return names }
