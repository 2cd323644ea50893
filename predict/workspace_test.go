package predict

import (
	"context"
	"slices"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// A cuDNN workspace never fails a step: PyTorch's algorithm loop catches
// the workspace's out-of-memory error and takes an algorithm that needs
// none (Conv_v7.cpp try_all, Conv_v8.cpp try_configs). VGG-16 at batch
// 128 (its 3×3 convolutions at 224×224 have the largest unfolded inputs
// of the zoo, and their backward kernels run when activations are still
// held): on an 80 GB device no workspace falls back and the largest is in
// the allocated peak. On a device 1 GiB above what the same step reserves
// with no workspace at all, where the step with every workspace taken as
// a plain allocation runs out of memory, the step fits and some
// workspaces fell back. The workspaces are the 2.5 profile's
// explicit-GEMM figures, over 1 GiB for those kernels (2.11's NHWC copies
// of the same kernels are smaller than the 1 GiB this test leaves).
func TestWorkspaceFallsBackNearTheLimit(t *testing.T) {
	m, err := models.Lookup("vgg16")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gpu.Lookup("a100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: 128}, GPU: g, Context: 0, Setup: train.Setup{Profile: p}}
	kept := req
	kept.KeepTrace = true
	far, err := Run(context.Background(), kept)
	if err != nil {
		t.Fatal(err)
	}
	ws := far.Summary.ConvWorkspaceBytes
	if !far.Fits || far.Timeline.FellBack != 0 || ws == 0 {
		t.Fatalf("80 GB: fits %v, fell back %d, largest workspace %d", far.Fits, far.Timeline.FellBack, ws)
	}
	if far.Timeline.PeakAllocated < ws {
		t.Errorf("80 GB: allocated peak %d below the largest workspace %d", far.Timeline.PeakAllocated, ws)
	}
	// the same trace with no workspace, and with plain workspaces
	if len(far.Trace.Repeats) != 0 {
		t.Fatal("a kept trace has its repeats written out")
	}
	none := &trace.Trace{Events: slices.Clone(far.Trace.Events)}
	plain := &trace.Trace{Events: slices.Clone(far.Trace.Events)}
	for i := range none.Events {
		if none.Events[i].Fallback != 0 {
			none.Events[i].Size = 0
		}
		plain.Events[i].Fallback = 0
	}
	low, err := alloc.Replay(none, alloc.Config{}, alloc.Device{}, alloc.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	near := req
	near.GPU.Capacity = low.PeakReserved + 1<<30 + far.Context
	dev := alloc.Device{Capacity: near.GPU.Capacity - far.Context, Total: near.GPU.Capacity}
	if tl, err := alloc.Replay(plain, alloc.Config{}, dev, alloc.ReplayOptions{}); err != nil || tl.OOM == nil {
		t.Fatalf("%d-byte device: the step with plain workspaces fits (err %v): no device lies between", near.GPU.Capacity, err)
	}
	res, err := Run(context.Background(), near)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fits || res.Timeline.FellBack == 0 {
		t.Errorf("%d-byte device: fits %v (%s), fell back %d times; want a fit with workspaces fallen back", near.GPU.Capacity, res.Fits, res.Decider, res.Timeline.FellBack)
	}
}
