package spec_test

import (
	"fmt"

	"github.com/batchfit/batchfit/spec"
)

func ExampleSpec_Build() {
	s, err := spec.Parse([]byte(`
name: tiny
input: {shape: [784]}
params: {hidden: 32}
layers:
  - linear: $hidden
  - relu
  - linear: 10
`), "tiny.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.Params())
	g, err := s.Build(64, 0, map[string]int64{"hidden": 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Name, g.ParamCount()) // 784·16+16 + 16·10+10
	for _, op := range g.Ops {
		fmt.Println(op.Kind, op.Name, g.Tensor(op.Output).Shape)
	}
	// Output:
	// map[hidden:32]
	// tiny 12730
	// linear 0 [64, 16]
	// relu 1 [64, 16]
	// linear 2 [64, 10]
	// cross_entropy loss []
}

func ExampleParse_error() {
	_, err := spec.Parse([]byte(`
input: [784]
layers:
  - linear: 128
  - rleu
`), "mlp.yaml")
	fmt.Println(err)
	// Output:
	// mlp.yaml:5: unknown layer type "rleu"; did you mean "relu"? (valid: linear, conv2d, batchnorm2d, batchnorm1d, layernorm, rmsnorm, relu, gelu, silu, sigmoid, tanh, hardswish, hardsigmoid, softmax, logsoftmax, dropout, maxpool2d, avgpool2d, adaptiveavgpool2d, flatten, mean, embedding, position_embedding, attention, residual, repeat)
}
