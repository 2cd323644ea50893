package capture

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/capture/internal/derivgen"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// derivatives_gen.go is what derivgen makes of the vendored yaml: run
// go generate in capture/ after changing either.
func TestDerivativesGenerated(t *testing.T) {
	var ts []derivgen.Table
	for _, tb := range derivgen.Tables {
		src, err := os.ReadFile(tb.File)
		if err != nil {
			t.Fatal(err)
		}
		tb.Src = src
		ts = append(ts, tb)
	}
	want, err := derivgen.Generate(ts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("derivatives_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("derivatives_gen.go is not what derivgen makes of testdata/derivatives: run go generate in capture/")
	}
	// the number of "- name:" entries of each file
	if len(derivativesV113) != 639 || len(derivativesV251) != 670 {
		t.Errorf("entries: %d, %d", len(derivativesV113), len(derivativesV251))
	}
}

// Entries worked by hand from the yaml text, the same in both releases:
//
//	mul.Tensor: self: mul_tensor_backward(grad, other, self.scalar_type())
//	            other: mul_tensor_backward(grad, self, other.scalar_type())
//	relu: self: threshold_backward(grad, result, 0)
//	sum.dim_IntList: self: sum_backward(grad, self.sym_sizes(), dim, keepdim)
//	where.self: condition: non_differentiable
//	            self: where(condition, grad, 0); other: where(condition, 0, grad)
//	native_layer_norm: input, weight, bias: ... layer_norm_backward(grad,
//	            input, normalized_shape, result1, result2, weight, bias, ...)
//	hypot: self: grad * self / result; other: grad * other / result
//	sort: self: value_selecting_reduction_backward(grad, dim, indices,
//	            self.sizes() (1.13) / self.sym_sizes() (2.5), true);
//	            output_differentiability: [True, False]
//	native_dropout: input: ... native_dropout_backward(grad, result1, ...):
//	            the mask, not the input
func TestDerivativesEntries(t *testing.T) {
	for _, c := range []struct {
		op           string
		saved, sizes []string
		nondiff      []int
	}{
		{"mul.Tensor", []string{"other", "self"}, nil, nil},
		{"relu", []string{"result"}, nil, nil},
		{"sum.dim_IntList", nil, []string{"self"}, nil},
		{"where.self", []string{"condition"}, nil, nil},
		{"native_layer_norm", []string{"bias", "input", "result1", "result2", "weight"}, nil, nil},
		{"hypot", []string{"other", "result", "self"}, nil, nil},
		{"sort", []string{"indices"}, []string{"self"}, []int{1}},
		{"native_dropout", []string{"result1"}, nil, nil},
	} {
		for v, tb := range map[string]map[string]derivEntry{"1.13": derivativesV113, "2.5": derivativesV251} {
			e, ok := tb[c.op]
			if !ok {
				t.Errorf("%s %s: no entry", v, c.op)
				continue
			}
			if !slices.Equal(e.Saved, c.saved) || !slices.Equal(e.SizesOnly, c.sizes) || !slices.Equal(e.NonDiff, c.nondiff) {
				t.Errorf("%s %s: saved %v, sizes only %v, non-differentiable %v; want %v, %v, %v", v, c.op, e.Saved, e.SizesOnly, e.NonDiff, c.saved, c.sizes, c.nondiff)
			}
		}
	}
	// dispatch: in v2.5.1 the Default formulas are CPU's and CUDA's
	// (_nested_tensor_size has none: not_implemented in v2.5.1 is absent)
	if e := derivativesV251["relu"]; !slices.Equal(e.Diff, []string{"self"}) {
		t.Errorf("relu: %v", e.Diff)
	}
}

// An in-place op takes its own entry where derivatives.yaml has one
// (leaky_relu_: "self: leaky_relu_backward(grad, result, negative_slope,
// true)", whose result is the output, self after the kernel) and its
// function's otherwise, the overload whose arguments are tensors where
// the call's are: pow_.Scalar is (Tensor self, Scalar exponent), which is
// pow.Tensor_Scalar ("self: pow_backward(grad, self, exponent)"), not
// pow.Scalar (Scalar self, Tensor exponent). acosh_'s own entry is
// not_implemented("inplace version of acosh"): none.
func TestDerivedInplaceEntries(t *testing.T) {
	tensor, number := arg{T: new(int)}, arg{}
	for _, c := range []struct {
		name  string
		args  []arg
		ok    bool
		saved []string
		args0 string
	}{
		{"aten::leaky_relu_", []arg{tensor, number}, true, []string{"result"}, "self"},
		{"aten::clamp_min_", []arg{tensor, number}, true, []string{"self"}, "self"},
		{"aten::exp_", []arg{tensor}, true, []string{"result"}, "self"},
		{"aten::pow_.Scalar", []arg{tensor, number}, true, []string{"self"}, "self"},
		{"aten::pow_.Tensor", []arg{tensor, tensor}, true, []string{"exponent", "result", "self"}, "self"},
		{"aten::acosh_", []arg{tensor}, false, nil, ""},
		{"aten::no_such_op_", []arg{tensor}, false, nil, ""},
	} {
		for v, tb := range map[string]map[string]derivEntry{"1.13": derivativesV113, "2.5": derivativesV251} {
			e, ok := derivMatch(tb, c.name, &op{Args: c.args})
			if ok != c.ok {
				t.Errorf("%s %s: found %v, want %v", v, c.name, ok, c.ok)
				continue
			}
			if ok && (!slices.Equal(e.Saved, c.saved) || e.Args[0].Name != c.args0) {
				t.Errorf("%s %s: saved %v (first argument %s), want %v (%s)", v, c.name, e.Saved, e.Args[0].Name, c.saved, c.args0)
			}
		}
	}
}

// Ops no hand-written rule maps (atan2, hypot, logit; erf has one), held to what
// PyTorch 1.13 on the CPU keeps for backward after the forward pass,
// parameters and the batch left out, measured by
// testdata/checkpoint_saved.py:
//
//	/usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/erf.py:make 8
func TestDerivedSaved(t *testing.T) {
	prof, err := profile.Lookup("1.13")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load("../testdata/capture/capture-erf.bfgraph.gz")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ActivationsBytes != 28996 {
		t.Errorf("saved %d bytes, PyTorch 28996", sum.ActivationsBytes)
	}
	if u := m.UnknownOps(); len(u) != 0 {
		t.Errorf("unknown %v", u)
	}
	var names []string
	for _, o := range m.GeneratedOps() {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	if want := []string{"aten::atan2", "aten::hypot", "aten::logit"}; !slices.Equal(names, want) {
		t.Errorf("generated %v, want %v", names, want)
	}
	if n := m.Note(); !strings.Contains(n, "3 ops by PyTorch 1.13.1's derivatives.yaml: ") {
		t.Errorf("note %q", n)
	}
}

// An op that requires grad with no derivatives.yaml entry, or whose
// entry is not_implemented, is refused by name, never mapped by a guess.
func TestDerivedRefusals(t *testing.T) {
	for _, c := range []struct{ op, want string }{
		{"aten::bucketize", "op aten::bucketize (module <root: Net>) has no rule in batchfit: nor has PyTorch 1.13.1's derivatives.yaml an entry for it"},
		// _standard_gamma_grad: self: not_implemented("_standard_gamma_grad")
		{"aten::_standard_gamma_grad", "op aten::_standard_gamma_grad (module <root: Net>) has no rule in batchfit: its derivative is not_implemented"},
	} {
		m, err := Load("../testdata/capture/capture-erf.bfgraph.gz")
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.f.Ops {
			if m.f.Ops[i].Aten == "aten::erf" {
				m.f.Ops[i].Aten = c.op
			}
		}
		_, err = m.Build(models.Config{Batch: 2})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v", c.op, err)
		}
	}
}
