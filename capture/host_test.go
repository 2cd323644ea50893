package capture

import (
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// TestHostTensors maps what a model keeps outside its parameters and
// buffers (testdata/host.bfgraph, hand-written): a [3] float32 tensor the
// model made on the host before the recording (GPT-J's embed_positions,
// recorded with device "cpu"), moved to the model's device
// (aten::_to_copy to meta) and added to the linear's output; and a 0-d
// tensor made on the meta device before the recording (GPT-J's
// scale_attn), which the sum is divided by. On a CPU run the host tensor
// exists before the step and Tensor.to returns it itself: nothing is
// allocated for either. The 0-d tensor is a tensor, not a Python number:
// DivBackward0 saves it. At batch 7, by hand (requested bytes, the CPU
// rules of 2.5):
//
//	parameters 15·4 = 60; batch: input 7·4·4 = 112, target 7·8 = 56;
//	the linear's output 7·3·4 = 84, the sum 84 (the linear's output goes),
//	the 0-d tensor 4 (a constant where it is first read), the quotient 84
//	(the sum goes), log_softmax's result 84, the loss 4, total_weight 4.
//
// The forward allocates 84·4+4+4+4 = 348 bytes besides the batch, its
// peak is 60+168+4+84+84+4+4 = 408 at the loss, and it saves the 0-d
// tensor (div), log_softmax's result and total_weight: 4+84+4 = 92.
func TestHostTensors(t *testing.T) {
	prof, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load("testdata/host.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 7, CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		t.Fatal(err)
	}
	live, err := trace.LiveByStep(tr)
	if err != nil {
		t.Fatal(err)
	}
	if got := live[0].Phases[trace.Forward].Peak; got != 408 {
		t.Errorf("forward peak %d bytes, want 408", got)
	}
	var made int64
	for i := 0; i < tr.Len(); i++ {
		if e := tr.At(i); e.Action == trace.Alloc && e.Step == 0 && (e.Phase == trace.Forward || e.Phase == trace.Loss) && e.Category != trace.Batch {
			made += e.Size
		}
	}
	if made != 348 {
		t.Errorf("the forward allocates %d bytes besides the batch, want 84·4+4+4+4 = 348", made)
	}
	if got := sum.ActivationsBytes; got != 92 {
		t.Errorf("saved %d bytes, want 92", got)
	}
}
