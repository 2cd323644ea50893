package graph

import (
	"strings"
	"testing"
)

// A LoRA adapter by hand: nn.Linear(6, 4) with r = 2 adds lora_A [2, 6]
// and lora_B [4, 2] (20 parameters, trainable), freezes the base weight and
// bias, and its output is base + lora_B(lora_A(x)) * scaling.
func TestLoRALinear(t *testing.T) {
	b := NewBuilder("t")
	b.Adapters = &Adapters{Rank: 2, Alpha: 4, Targets: []string{"proj"}}
	x := b.Input("x", Shape{3, 6}, F32)
	h := b.Linear("block.proj", x, 4, true)
	withLoss(b, b.Linear("head", h, 2, false))
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	var trainable, frozen []string
	for _, id := range g.Params() {
		p := g.Tensor(id)
		if p.RequiresGrad {
			trainable = append(trainable, p.Name+p.Shape.String())
		} else {
			frozen = append(frozen, p.Name)
		}
	}
	if got := strings.Join(trainable, " "); got != "block.proj.lora_A.weight[2, 6] block.proj.lora_B.weight[4, 2]" {
		t.Errorf("trainable %s", got)
	}
	if got := strings.Join(frozen, " "); got != "block.proj.weight block.proj.bias head.weight" {
		t.Errorf("frozen %s", got)
	}
	var kinds []string
	for _, op := range g.Ops {
		kinds = append(kinds, string(op.Kind)+":"+op.Name)
	}
	want := "linear:block.proj linear:block.proj.lora_A linear:block.proj.lora_B mul:block.proj.scaling add:block.proj.lora_add linear:head mse_loss:loss"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("ops %s\nwant %s", got, want)
	}
	// the base output requires no grad (x does not, the weight is frozen);
	// the sum does, through the adapter
	if g.Tensor(g.Ops[0].Output).RequiresGrad || !g.Tensor(g.Ops[4].Output).RequiresGrad {
		t.Error("requires_grad does not follow the frozen base and the trainable adapter")
	}
	if (&Adapters{Rank: 2, Alpha: 4}).Scaling() != 2 {
		t.Error("scaling is not alpha / r")
	}
}

// Dropout on the adapter's input comes first; a target that matches no
// Linear is an error naming the Linear layers there are.
func TestLoRADropoutAndTargets(t *testing.T) {
	b := NewBuilder("t")
	b.Adapters = &Adapters{Rank: 1, Alpha: 1, Dropout: 0.1, Targets: []string{"q"}}
	x := b.Input("x", Shape{3, 6}, F32)
	withLoss(b, b.Linear("attn.q", x, 4, false))
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if g.Ops[1].Kind != Dropout || g.Ops[1].Name != "attn.q.lora_dropout" {
		t.Errorf("second op %s %s", g.Ops[1].Kind, g.Ops[1].Name)
	}
	b = NewBuilder("t")
	b.Adapters = &Adapters{Rank: 1, Alpha: 1, Targets: []string{"q_proj", "attn.q"}}
	b.Linear("attn.q", b.Input("x", Shape{3, 6}, F32), 4, false)
	withLoss(b, b.Linear("attn.k", b.Input("y", Shape{3, 6}, F32), 4, false))
	if _, err := b.Graph(); err == nil || !strings.Contains(err.Error(), "LoRA target modules q_proj match no Linear layer of the model (its Linear layers are named attn.k, attn.q)") {
		t.Errorf("error %v", err)
	}
	// "q" matches a name ending in ".q", not one that merely ends in q
	b = NewBuilder("t")
	b.Adapters = &Adapters{Rank: 1, Alpha: 1, Targets: []string{"q"}}
	withLoss(b, b.Linear("attn.seq", b.Input("x", Shape{3, 6}, F32), 4, false))
	if _, err := b.Graph(); err == nil {
		t.Error("target q matched attn.seq")
	}
}

// Freezing by module: the module and everything inside it.
func TestFreeze(t *testing.T) {
	b := NewBuilder("t")
	b.Adapters = &Adapters{Freeze: []string{"embed", "layers.0"}}
	x := b.Input("x", Shape{3, 6}, F32)
	h := b.Linear("model.embed", x, 6, false)
	h = b.Linear("model.layers.0.mlp", h, 6, false)
	h = b.Linear("model.layers.1.mlp", h, 6, false)
	withLoss(b, b.Linear("model.layers.10.mlp", h, 6, false))
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	var frozen []string
	for _, id := range g.Params() {
		if !g.Tensor(id).RequiresGrad {
			frozen = append(frozen, g.Tensor(id).Name)
		}
	}
	if got := strings.Join(frozen, " "); got != "model.embed.weight model.layers.0.mlp.weight" {
		t.Errorf("frozen %s", got)
	}
	// a name that freezes nothing is a typo, not a choice
	b = NewBuilder("t")
	b.Adapters = &Adapters{Freeze: []string{"embed", "layerz"}}
	withLoss(b, b.Linear("model.embed", b.Input("x", Shape{3, 6}, F32), 6, false))
	if _, err := b.Graph(); err == nil || !strings.Contains(err.Error(), "--freeze layerz names no module") {
		t.Errorf("typo: %v", err)
	}
	for _, a := range []*Adapters{{Rank: -1}, {Rank: 4}, {Rank: 4, Targets: []string{"q"}, Dropout: 1}} {
		if a.Check() == nil {
			t.Errorf("%+v: no error", a)
		}
	}
}

func withLoss(b *Builder, out TensorID) {
	b.MSELoss("loss", out, b.Target("target", b.Shape(out), F32))
}
