package train

import (
	"testing"
)

// Setup.KeepOutput: the loop's output = model(...) holds the returned
// logits through backward and the optimizer step until the next forward
// rebinds the name. TestTinyMLPPeak's network (Linear(4→8), ReLU,
// Linear(8→2), batch 16, SGD, two steps) with its logits returned:
//
//	logits: 16·2·4 = 128 B.
//	At the end, without it: parameters 232 + last batch 384 + last loss 4
//	= 620 (TestTinyMLPPeak); with it the last step's logits are held too:
//	620 + 128 = 748.
//	The peak, inside cross-entropy's backward (grad of log-probabilities,
//	grad of logits, the saved log-probabilities and ReLU output beside
//	parameters, batch and loss), has the logits alive besides: 128 B
//	more. The forward's end, where the previous and the new logits are
//	both held (+256), is below it by more than the two gradients
//	(2·128 B) that the backward adds, so the peak stays where it was.
func TestKeepOutputHoldsLogits(t *testing.T) {
	g := returnedMLP(t, 16, 4, 8, 2)
	run := func(keep bool) (peak, end int64) {
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Optimizer: Optimizer{Kind: SGD}, Steps: 2, KeepOutput: keep})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		peak, _ = peakLive(tr)
		return peak, liveAtEnd(tr)
	}
	p0, e0 := run(false)
	p1, e1 := run(true)
	if e0 != 620 || e1 != 748 {
		t.Errorf("alive at the end: %d without the output held, %d with it; want 620 and 748", e0, e1)
	}
	if p1-p0 != 128 {
		t.Errorf("peak %d with the output held, %d without: want 128 B (the logits) more", p1, p0)
	}
}
