package capture

import (
	"encoding/json"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// TestWrappedNumber: a Python number reaches the Tensor overload of add,
// sub, mul and div wrapped in a 0-d tensor of its Python type
// (PythonArgs::tensor_slow: a float a double, an int an int64, a bool a
// bool); mul and div keep it for self's gradient; the Scalar overloads,
// which a functional's own code calls, wrap nothing.
func TestWrappedNumber(t *testing.T) {
	var x bctx
	for _, c := range []struct {
		overload, v, base string
		want              graph.Number
	}{
		{"Tensor", "0.1767766952966369", "mul", graph.Number{Wrapped: true, DType: graph.F64, Kept: true}},
		{"Tensor", "1e-05", "div", graph.Number{Wrapped: true, DType: graph.F64, Kept: true}},
		{"Tensor_mode", "2", "div", graph.Number{Wrapped: true, DType: graph.I64, Kept: true}},
		{"Tensor", "2.0", "sub", graph.Number{Wrapped: true, DType: graph.F64}},
		{"Tensor", "1", "add", graph.Number{Wrapped: true, DType: graph.I64}},
		{"Tensor", "true", "mul", graph.Number{Wrapped: true, DType: graph.Bool, Kept: true}},
		{"Tensor", `"inf"`, "mul", graph.Number{Wrapped: true, DType: graph.F64, Kept: true}},
		{"Scalar", "0.9", "div", graph.Number{}},
		{"Tensor", "2", "rsub", graph.Number{}},
	} {
		o := &op{Overload: c.overload, Args: []arg{{}, {V: json.RawMessage(c.v)}}}
		if got := x.wrappedNumber(o, c.base); got != c.want {
			t.Errorf("%s.%s(x, %s): %+v, want %+v", c.base, c.overload, c.v, got, c.want)
		}
	}
}
