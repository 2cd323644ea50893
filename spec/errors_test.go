package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestErrors checks that every mistake is reported at the line that holds
// it. Line numbers count from the first line of src.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want string // the whole error starts with "t.yaml:LINE: " and contains the rest
	}{
		{"unknown layer type", `input: [8]
layers:
  - linear: 4
  - linaer: 4
`, `t.yaml:4: unknown layer type "linaer"; did you mean "linear"?`},
		{"unknown layer type lists valid ones", `input: [8]
layers:
  - frobnicate
`, `t.yaml:3: unknown layer type "frobnicate" (valid: linear, conv2d, batchnorm2d`},
		{"unknown field", `input: [8]
layers:
  - linear: {out: 4, biass: true}
`, `t.yaml:3: linear: unknown field "biass"; did you mean "bias"? (valid: out, bias, in, out_features, in_features, name)`},
		{"unknown sibling field", `input: [8]
layers:
  - linear: 4
    kernel: 3
`, `t.yaml:4: linear: unknown field "kernel"`},
		{"missing field", `input: [3, 8, 8]
layers:
  - conv2d:
      out: 4
`, `t.yaml:3: conv2d: missing kernel (conv2d: {out: 64, kernel: 3, padding: 1})`},
		{"field twice", `input: [8]
layers:
  - linear: {out: 4}
    out: 5
`, `t.yaml:4: linear: out given twice (first on line 3)`},
		{"zero out", `input: [8]
layers:
  - linear:
      out: 0
`, `t.yaml:4: linear: out must be a positive integer, got 0`},
		{"zero out from a symbol", `input: [8]
params:
  h: 0
layers:
  - linear: $h
`, `t.yaml:5: linear: out must be a positive integer, got 0`},
		{"negative padding", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 3,
      padding: [1, -1]}
`, `t.yaml:4: conv2d: padding must be a non-negative integer, a pair [h, w], same or valid, got -1`},
		{"non-integer", `input: [8]
layers:
  - linear: 2.5
`, `t.yaml:3: linear: out must be an integer, got "2.5"`},
		{"list for an int", `input: [8]
layers:
  - linear: {out: [1, 2]}
`, `t.yaml:3: linear: out must be an integer, got a list`},
		{"bad pair", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: [3, 3, 3]}
`, `t.yaml:3: conv2d: kernel must be a positive integer or a pair [h, w], got a list of 3`},
		{"bad bool", `input: [8]
layers:
  - linear: 4
    bias: yes
`, `t.yaml:4: linear: bias must be true or false, got "yes"`},
		{"bad probability", `input: [8]
layers:
  - linear: 4
  - dropout: 1.5
`, `t.yaml:4: dropout: p must be a number from 0 to 1, got "1.5"`},
		{"bad enum", `input: [8]
layers:
  - linear: 4
  - gelu: {approximate: erf}
`, `t.yaml:4: gelu: approximate must be one of none, tanh, got "erf"`},
		{"value for a type without a main field", `input: [8]
layers:
  - linear: 4
  - relu: true
`, `t.yaml:4: relu: unexpected value "true"; give its fields as a mapping (relu or relu: {inplace: true})`},
		{"bad expression", `input: [8]
params: {h: 4}
layers:
  - linear: $h +* 2
`, `t.yaml:4: linear: out must be an integer or an expression such as $hidden * 4: unexpected "*"`},
		{"unknown symbol", `input: [8]
params:
  hidden: 16
layers:
  - linear: $hiden
`, `t.yaml:5: linear: out: unknown symbol "hiden"; did you mean "hidden"? (symbols: hidden, seq; declare new ones under params)`},
		{"batch is not a symbol", `input: [8]
layers:
  - linear: $batch
`, `t.yaml:3: linear: out: batch is not a symbol`},
		{"inexact division", `input: [8]
params: {h: 10}
layers:
  - linear: $h / 3
`, `t.yaml:4: linear: 10 / 3 is not a whole number (write // to round down)`},
		{"division by zero", `input: [8]
params: {h: 0}
layers:
  - linear: 8 // $h
`, `t.yaml:4: linear: division by zero`},
		{"overflow", `input: [8]
params: {h: 9223372036854775807}
layers:
  - linear: $h + 1
`, `t.yaml:4: linear: integer overflow`},
		{"unknown dtype", `input:
  shape: [8]
  dtype: floaty32
layers: [linear: 2]
`, `t.yaml:3: input: unknown dtype "floaty32"`},
		{"bad input shape", `input:
  shape: [3, 0]
layers: [linear: 2]
`, `t.yaml:2: input shape must be a positive integer, got 0`},
		{"input shape from a symbol", `params: {w: -1}
input:
  shape: [3, $w]
layers: [linear: 2]
`, `t.yaml:3: input shape sizes must be positive, got -1`},
		{"missing input", `name: x
layers: [linear: 2]
`, `t.yaml:1: missing input`},
		{"unknown input key", `input: {shape: [8], dtyp: int64}
layers: [linear: 2]
`, `t.yaml:1: input: unknown key "dtyp"; did you mean "dtype"?`},
		{"unknown top-level key", `input: [8]
layer:
  - linear: 2
`, `t.yaml:2: unknown key "layer"; did you mean "layers"?`},
		{"top-level key twice", `input: [8]
layers: [linear: 2]
layers: [linear: 3]
`, `t.yaml:3: layers given twice (first on line 2)`},
		{"empty layers", `input: [8]
layers: []
`, `t.yaml:2: layers is empty`},
		{"layers not a list", `input: [8]
layers:
  linear: 2
`, `t.yaml:3: expected a list of layers, got a mapping`},
		{"a layer that is a list", `input: [8]
layers:
  - [linear, relu]
`, `t.yaml:3: expected a layer`},
		{"unknown loss", `input: [8]
loss: hinge
layers: [linear: 2]
`, `t.yaml:2: loss must be cross_entropy or mse, got "hinge"`},
		{"cross entropy of a 4-d output", `input: [3, 8, 8]
loss: cross_entropy
layers:
  - conv2d: {out: 4, kernel: 3}
`, `t.yaml:2: cross_entropy needs outputs [batch, classes] or [batch, seq, classes], got [2, 4, 6, 6]`},
		{"cross entropy of integers", `input: {shape: [8], dtype: int64}
layers:
  - flatten
`, `t.yaml:3: cross_entropy needs float logits, got int64 outputs`},
		{"builder shape error", `input: [3, 4, 4]
layers:
  - conv2d: {out: 4, kernel: 3}
  - maxpool2d: 3
`, `t.yaml:4: maxpool2d: 1: max_pool2d kernel [3 3] larger than input [2, 2]`},
		{"rank error", `input: [8]
layers:
  - linear: 4
  - conv2d: {out: 4, kernel: 3}
`, `t.yaml:4: conv2d: needs an input of shape [batch, channels, height, width], got [2, 4]`},
		{"batchnorm2d rank", `input: [8]
layers:
  - batchnorm2d
`, `t.yaml:3: batchnorm2d: needs an input of shape [batch, channels, height, width], got [2, 8]`},
		{"batchnorm1d features", `input: [8]
layers:
  - BatchNorm1d:
      num_features: 9
`, `t.yaml:4: batchnorm1d: features is 9 but the input [2, 8] has 8`},
		{"adaptive pool rank", `input: [8]
layers:
  - linear: 4
  - adaptiveavgpool2d: 1
`, `t.yaml:4: adaptiveavgpool2d: needs an input of shape [batch, channels, height, width], got [2, 4]`},
		{"linear in mismatch", `input: [8]
layers:
  - linear: {in: 9, out: 4}
`, `t.yaml:3: linear: in is 9 but the input [2, 8] has 8`},
		{"conv groups", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 1,
      groups: 2}
`, `t.yaml:4: conv2d: groups 2 must divide both the input channels 3 and out 4`},
		{"same padding with stride", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 3, stride: 2,
      padding: same}
`, `t.yaml:4: conv2d: padding same needs stride 1`},
		{"pool padding", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 1}
  - maxpool2d: {kernel: 2, padding: 2}
`, `t.yaml:4: maxpool2d: padding [2 2] must be at most half the kernel [2 2]`},
		{"residual changes the shape", `input: [8]
layers:
  - linear: 8
  - residual:
      - linear: 4
`, `t.yaml:4: residual: the inner layers change the shape from [2, 8] to [2, 4]`},
		{"error inside a residual", `input: [8]
layers:
  - residual:
      - linear: 4
      - layernorm: {dims: 2}
`, `t.yaml:5: layernorm: cannot normalize over the last 2 dimensions of [2, 4]`},
		{"error in a repeated block", `input: [8]
params: {n: 3}
layers:
  - repeat: $n
    block:
      - linear: 8
      - flatten: 0
`, `t.yaml:7: flatten: dimension 0 is the batch dimension`},
		{"empty block", `input: [8]
layers:
  - repeat: 2
    block: []
`, `t.yaml:4: repeat: block needs at least one layer`},
		{"missing block", `input: [8]
layers:
  - repeat: 2
`, `t.yaml:3: repeat: missing block`},
		{"negative repeat", `input: [8]
params: {n: -1}
layers:
  - repeat: $n
    block: [linear: 8]
`, `t.yaml:4: repeat: count must be a non-negative integer, got -1`},
		{"dim out of range", `input: [8]
layers:
  - linear: 4
  - softmax: 2
`, `t.yaml:4: softmax: dimension 2 out of range for an input of shape [2, 4]`},
		{"mean over a dim twice", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 1}
  - mean: [2, -2]
`, `t.yaml:4: mean: dimension 2 listed twice`},
		{"embedding of floats", `input: [5]
layers:
  - embedding: {num: 10, dim: 4}
`, `t.yaml:3: embedding: needs integer token ids, but its input is float32 (set input: {dtype: int64})`},
		{"attention heads", `input: {shape: [5], dtype: int64}
layers:
  - embedding: {num: 10, dim: 6}
  - attention: 4
`, `t.yaml:4: attention: heads 4 does not divide the model dimension 6`},
		{"attention rank", `input: [6]
layers:
  - attention: 2
`, `t.yaml:3: attention: needs an input of shape [batch, seq, dim], got [2, 6]`},
		{"duplicate names", `input: [8]
layers:
  - linear: {out: 8, name: fc}
  - linear: {out: 8, name: fc}
`, `t.yaml:4: layer name "fc" already used on line 3`},
		{"name with a dot", `input: [8]
layers:
  - linear: {out: 8, name: a.b}
`, `t.yaml:3: linear: name must be a module name`},
		{"no parameters", `input: [8]
layers:
  - relu
`, `t.yaml: the layers have no parameters`},
		{"param not an integer", `input: [8]
params:
  h: lots
layers: [linear: $h]
`, `t.yaml:3: parameter h must be an integer, got "lots"`},
		{"param name", `input: [8]
params:
  2x: 3
layers: [linear: 2]
`, `t.yaml:3: parameter name "2x" is not a name`},
		{"param batch", `input: [8]
params:
  batch: 3
layers: [linear: 2]
`, `t.yaml:3: batch is not a parameter`},
		{"yaml syntax", `input: [8]
layers:
  - linear: {out: 4
  - relu
`, `t.yaml:3: invalid YAML in the {...} mapping that starts here: did not find expected ',' or '}'`},
		{"tabs", "input: [8]\nlayers:\n\t- relu\n", `t.yaml:3: invalid YAML: found character that cannot start any token`},
		{"two documents", `input: [8]
layers: [linear: 2]
---
input: [9]
`, `t.yaml:3: a spec is one YAML document; found a second one`},
		{"not a mapping", `- linear: 2
`, `t.yaml:1: a spec is a mapping with keys name, description, input, loss, params, layers, got a list`},
		{"empty", ``, `t.yaml: empty spec`},
		{"self-containing alias", `input: [8]
layers: &a
  - linear: 8
  - residual: *a
`, `t.yaml:4: a list of layers contains itself (through an alias)`},
		{"too many ops", `input: [8]
layers:
  - repeat: 600000
    block: [linear: 8]
`, `t.yaml:3: repeat: expands to more than 1000000 ops`},
		{"too many ops in all", `input: [8]
layers:
  - repeat: 400000
    block: [linear: 8]
  - repeat: 400000
    block: [linear: 8]
`, `t.yaml: the layers expand to more than 1000000 ops`},
		{"too many parameters", `input: [8]
layers:
  - linear: 100000000000000
`, `t.yaml:3: linear: more than 281474976710656 parameters`},
		{"too large an activation", `input: [65536, 8]
layers:
  - linear: 8
  - linear: {out: 4294967296, bias: false}
`, `t.yaml:4: linear: output [2, 65536, 4294967296] has more than 281474976710656 elements`},
		{"kernel too large", `input: [3, 8, 8]
layers:
  - conv2d: {out: 4, kernel: 2000000}
`, `t.yaml:3: conv2d: kernel 2000000 is larger than 1048576`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse([]byte(tc.src), "t.yaml")
			if err == nil {
				_, err = s.Build(2, 0, nil)
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Errorf("error %v is not a *spec.Error", err)
			}
			prefix, rest, _ := strings.Cut(tc.want, ": ")
			if got := err.Error(); !strings.HasPrefix(got, prefix+": ") || !strings.Contains(got, rest) {
				t.Errorf("error\n  %s\nwant\n  %s", got, tc.want)
			}
			if msg := err.Error(); len(msg) > 600 {
				t.Errorf("error message of %d bytes", len(msg))
			}
		})
	}
}

func TestErrorLineField(t *testing.T) {
	_, err := Parse([]byte("input: [8]\nlayers:\n  - relu\n  - lin\n"), "a/b.yaml")
	var se *Error
	if !errors.As(err, &se) || se.File != "a/b.yaml" || se.Line != 4 {
		t.Fatalf("got %#v", err)
	}
	if !strings.Contains(err.Error(), `did you mean "linear"?`) {
		t.Errorf("%v", err)
	}
}

func TestLimits(t *testing.T) {
	// Nesting: 40 residuals inside each other.
	var b strings.Builder
	b.WriteString("input: [8]\nlayers:\n")
	indent := "  "
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "%s- residual:\n", indent)
		indent += "    "
	}
	fmt.Fprintf(&b, "%s- linear: 8\n", indent)
	_, err := Parse([]byte(b.String()), "deep.yaml")
	if err == nil || !strings.Contains(err.Error(), "nested more than 32 deep") {
		t.Errorf("deep nesting: %v", err)
	}

	// Nesting built from aliases, each list one level deeper than the last,
	// is caught when the spec is built.
	b.Reset()
	b.WriteString("input: [8]\nlayers:\n  - residual: &l0 [linear: 8]\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "  - residual: &l%d [residual: *l%d]\n", i, i-1)
	}
	s, err := Parse([]byte(b.String()), "alias.yaml")
	if err == nil {
		_, err = s.Build(1, 0, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "nested more than 32 deep") {
		t.Errorf("deep aliases: %v", err)
	}

	// A billion laughs: each list holds the previous one ten times. Parsing
	// shares the lists; building refuses the expansion.
	b.Reset()
	b.WriteString("input: [8]\nlayers:\n  - repeat: 1\n    block: &a0 [linear: 8]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  - repeat: 1\n    block: &a%d [", i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{residual: *a%d}", i-1)
		}
		b.WriteString("]\n")
	}
	s, err = Parse([]byte(b.String()), "laughs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = s.Build(1, 0, nil); err == nil || !strings.Contains(err.Error(), "more than 1000000 ops") {
		t.Errorf("billion laughs: %v", err)
	}

	// Size.
	big := "input: [8]\nlayers:\n" + strings.Repeat("  - relu\n", MaxFileSize/9+1)
	if _, err := Parse([]byte(big), "big.yaml"); err == nil || !strings.Contains(err.Error(), "larger than the 1048576-byte limit") {
		t.Errorf("big file: %v", err)
	}

	// Just under the op limit builds.
	s, err = Parse([]byte("input: [8]\nlayers:\n  - repeat: 1000\n    block: [linear: 8, relu]\n"), "ok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if g, err := s.Build(1, 0, nil); err != nil || len(g.Ops) != 2001 {
		t.Errorf("1000 blocks: %v", err)
	}
}
