package predict

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// A prediction under a context that is done stops with the context's
// error, in training and in generation (whose decode steps are the longest
// loop), rather than answering.
func TestRunStopsWhenCancelled(t *testing.T) {
	g := gpu.GPU{Name: "test", Capacity: 80 << 30, Major: 9}
	src := toyLlama("4.46.0")
	gen := &Inference{Mode: ModeGenerate, NewTokens: 64}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		in   *Inference
		want error
	}{
		{"train, cancelled", cancelled, nil, context.Canceled},
		{"generate, cancelled", cancelled, gen, context.Canceled},
		{"train, past its deadline", expired, nil, context.DeadlineExceeded},
	} {
		_, err := Run(c.ctx, Request{Source: src, Config: models.Config{Batch: 2, Seq: 16}, GPU: g, Context: 0, Infer: c.in})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// cancelled part way: the checks inside the simulation's loops stop it
	for _, in := range []*Inference{nil, gen} {
		for k := 1; k <= 4; k++ {
			ctx := &countdown{Context: context.Background(), left: k}
			_, err := Run(ctx, Request{Source: src, Config: models.Config{Batch: 2, Seq: 16}, Setup: train.Setup{Steps: 8}, GPU: g, Context: 0, Infer: in})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("inference %v, cancelled after %d checks: got %v, want %v", in != nil, k, err, context.Canceled)
			}
		}
	}
	// the same request under a live context answers
	if _, err := Run(context.Background(), Request{Source: src, Config: models.Config{Batch: 2, Seq: 16}, GPU: g, Context: 0, Infer: gen}); err != nil {
		t.Fatal(err)
	}
}

// countdown is a context that is cancelled once Err has been asked left
// times: a cancellation that arrives while a prediction runs.
type countdown struct {
	context.Context
	left int
}

func (c *countdown) Err() error {
	if c.left <= 0 {
		return context.Canceled
	}
	c.left--
	return nil
}
