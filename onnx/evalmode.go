package onnx

import (
	"fmt"
	"strings"
)

// foldedConvPrefix starts the names torch.onnx.export gives the weight and
// bias of a convolution it folded a BatchNorm into. In eval mode
// (training=TrainingMode.EVAL, the default) torch/onnx/utils.py
// _model_to_graph runs _C._jit_pass_onnx_eval_peephole, whose
// fuseConvBatchNorm (torch/csrc/jit/passes/onnx/eval_peephole.cpp)
// replaces Conv + BatchNormalization by one Conv with new weight and bias
// graph inputs; the exporter names those after their consumer,
// onnx::Conv_<n>, where a module's own parameters keep their names
// ("0.weight", "layer1.0.conv1.weight"). A training-mode export keeps the
// BatchNormalization nodes (training_mode=1 from opset 14, with the
// running statistics as extra outputs) and the convolutions' own names.
const foldedConvPrefix = "onnx::Conv_"

// foldedBatchNorms counts the Conv nodes whose weight and bias are both
// initializers the exporter made by folding a BatchNorm into them (see
// foldedConvPrefix). Only files PyTorch produced are read this way: the
// names are its exporter's.
func (cv *converter) foldedBatchNorms() int {
	if !strings.HasPrefix(cv.m.Producer, "pytorch") {
		return 0
	}
	n := 0
	for i, node := range cv.nodes {
		if cv.skip[i] || node.GetOpType() != "Conv" || len(node.GetInput()) < 3 {
			continue
		}
		folded := true
		for _, in := range node.GetInput()[1:3] {
			v, ok := cv.vals[in]
			folded = folded && ok && v.kind == kInit && strings.HasPrefix(in, foldedConvPrefix)
		}
		if folded {
			n++
		}
	}
	return n
}

// noteFoldedBatchNorms names an eval-mode export whose BatchNorms were
// folded away: the graph trains the folded net, which saves less than
// the module did (no BatchNorm inputs and statistics) and has fewer
// parameters.
func (cv *converter) noteFoldedBatchNorms() {
	n := cv.foldedBatchNorms()
	if n == 0 {
		return
	}
	cv.m.notes = append(cv.m.notes, fmt.Sprintf("exported in eval mode: torch.onnx.export folded each BatchNorm into the convolution before it "+
		"(%d convolutions carry its %s… weights and biases); training memory is for the folded net — "+
		"export with training=torch.onnx.TrainingMode.TRAINING for the real one", n, foldedConvPrefix))
}
