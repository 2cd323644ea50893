package graph

import (
	"strings"
	"testing"
)

// The stored bytes of one Linear(128 → 64) weight (n = 64·128 = 8192
// elements) in each format, worked out from the libraries' layouts.
func TestQuantStoredBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		q    Quant
		want int64
	}{
		// packed codes n/2 = 4096 B; absmax 8192/64 = 128 float32 = 512 B;
		// the 16-entry float32 code 64 B
		{"nf4", Quant{Format: NF4, BlockSize: 64, Compute: BF16}, 4096 + 512 + 64},
		{"fp4 block 128", Quant{Format: FP4, BlockSize: 128, Compute: BF16}, 4096 + 64*4 + 64},
		// double quantization: 4096 packed + 64 code + 4 offset + 128
		// uint8 absmax + ceil(128/256) = 1 float32 nested absmax (4 B) +
		// the 256-entry float32 nested code (1024 B)
		{"nf4 double", Quant{Format: NF4, BlockSize: 64, DoubleQuant: true, Compute: BF16}, 4096 + 64 + 4 + 128 + 4 + 1024},
		// CB int8 8192 B + SCB one float32 per output row: 64·4 = 256 B
		{"int8", Quant{Format: Int8, Compute: F16}, 8192 + 256},
		// qweight [128·4/32 = 16, 64] int32 = 4096 B; one group: qzeros
		// [1, 64·4/32 = 8] int32 = 32 B; scales [1, 64] fp16 = 128 B;
		// g_idx [128] int32 = 512 B
		{"gptq 4-bit g128", Quant{Format: GPTQ, Bits: 4, GroupSize: 128, Compute: F16}, 4096 + 32 + 128 + 512},
		// two groups of 64: qzeros [2, 8] int32 = 64 B, scales [2, 64]
		// fp16 = 256 B
		{"gptq 4-bit g64", Quant{Format: GPTQ, Bits: 4, GroupSize: 64, Compute: F16}, 4096 + 64 + 256 + 512},
		// 3 bits: qweight [ceil(128·3/32) = 12, 64] int32 = 3072 B,
		// qzeros [1, ceil(64·3/32) = 6] int32 = 24 B
		{"gptq 3-bit per row", Quant{Format: GPTQ, Bits: 3, GroupSize: -1, Compute: F16}, 3072 + 24 + 128 + 512},
		// qweight [128, 64·4/32 = 8] int32 = 4096 B; qzeros [1, 8] int32 =
		// 32 B; scales [1, 64] fp16 = 128 B
		{"awq 4-bit g128", Quant{Format: AWQ, Bits: 4, GroupSize: 128, Compute: F16}, 4096 + 32 + 128},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.q.Check(); err != nil {
				t.Fatal(err)
			}
			if got := c.q.StoredBytes(64, 128); got != c.want {
				t.Errorf("stored bytes = %d, want %d (%+v)", got, c.want, c.q.Pieces(64, 128))
			}
		})
	}
}

// An odd element count rounds the packed codes and the blocks up:
// Linear(3 → 5), n = 15: 8 bytes of codes, one block of 64.
func TestQuantOddSizes(t *testing.T) {
	q := Quant{Format: NF4, BlockSize: 64, Compute: F16}
	ps := q.Pieces(5, 3)
	if ps[0].Bytes() != 8 || ps[1].Bytes() != 4 {
		t.Errorf("pieces %+v: want 8 bytes of codes and one float32 absmax", ps)
	}
}

func TestQuantCheck(t *testing.T) {
	for _, c := range []struct {
		q    Quant
		want string
	}{
		{Quant{Format: NF4, BlockSize: 48, Compute: BF16}, "block size"},
		{Quant{Format: GPTQ, Bits: 5, GroupSize: 128, Compute: F16}, "bits"},
		{Quant{Format: AWQ, Bits: 8, GroupSize: 128, Compute: F16}, "4-bit"},
		{Quant{Format: GPTQ, Bits: 4, GroupSize: -2, Compute: F16}, "group size"},
		{Quant{Format: NF4, BlockSize: 64, Compute: I8}, "floating"},
	} {
		err := c.q.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one about %q", c.q, err, c.want)
		}
	}
}

func TestParseQuantFormat(t *testing.T) {
	for in, want := range map[string]QuantFormat{"nf4": NF4, "NF4": NF4, "fp4": FP4, "int8": Int8, "gptq": GPTQ, "awq": AWQ} {
		if got, err := ParseQuantFormat(in); err != nil || got != want {
			t.Errorf("ParseQuantFormat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	_, err := ParseQuantFormat("nf5")
	if err == nil || !strings.Contains(err.Error(), `did you mean "nf4"`) {
		t.Errorf("nf5: %v", err)
	}
	if _, err := ParseQuantFormat("none"); err == nil {
		t.Error("none: want an error (it is not a format to ask for)")
	}
}

// The Builder quantizes the weights of the Linear layers it builds, except
// skipped ones and LoRA's own, and freezes them.
func TestBuilderQuantizes(t *testing.T) {
	b := NewBuilder("t")
	b.Quant = &Quant{Format: NF4, BlockSize: 64, Compute: BF16, Skip: []string{"head"}}
	b.Adapters = &Adapters{Rank: 2, Alpha: 4, Targets: []string{"fc"}}
	x := b.Input("x", Shape{4, 16}, F32)
	y := b.Input("y", Shape{4}, I64)
	h := b.Linear("fc", x, 16, true)
	h = b.Linear("head", h, 3, false)
	b.CrossEntropy("loss", h, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	quant := map[string]bool{}
	for _, id := range g.Params() {
		p := g.Tensor(id)
		quant[p.Name] = p.Quant != nil
		if p.Quant != nil && p.RequiresGrad {
			t.Errorf("%s: quantized and trainable", p.Name)
		}
	}
	want := map[string]bool{"fc.weight": true, "fc.bias": false, "fc.lora_A.weight": false, "fc.lora_B.weight": false, "head.weight": false}
	for n, q := range want {
		if quant[n] != q {
			t.Errorf("%s quantized = %v, want %v", n, quant[n], q)
		}
	}
	// PEFT's Linear4bit clones the 4-bit base layer's result before
	// adding the adapter's: one copy of fc's [4, 16] output
	var clones int
	for _, op := range g.Ops {
		if op.Name == "fc.clone" && op.Kind == Contiguous && g.Tensors[op.Output].Shape.Numel() == 64 {
			clones++
		}
	}
	if clones != 1 {
		t.Errorf("%d clones of fc's output, want 1", clones)
	}
}

// ParseQuantFormat never panics, and a name it accepts prints back as
// itself in lower case.
func FuzzParseQuantFormat(f *testing.F) {
	for _, s := range []string{"nf4", "FP4", " int8 ", "gptq", "awq", "none", "", "nf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuantFormat(s)
		if err != nil {
			if q != NoQuant {
				t.Errorf("%q: error %v with format %v", s, err, q)
			}
			return
		}
		if q == NoQuant || q.String() != strings.ToLower(strings.TrimSpace(s)) {
			t.Errorf("%q parsed as %v", s, q)
		}
	})
}

// Releases before 0.43.2 keep MatMul4Bit's input (bitsandbytes#1270).
func TestBnbKeepsInput(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0.41.1": true, "0.43.1": true, "v0.43.2": false, "0.43": true, "0.49.2": false, "1.0": false} {
		if got, err := BnbKeepsInput(v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"0.4x", "1", "0..1", "0.41.1.2", "-1.0"} {
		if _, err := BnbKeepsInput(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}

// Release strings never panic, and a release and the same with a "v"
// before it answer alike.
func FuzzBnbKeepsInput(f *testing.F) {
	for _, s := range []string{"0.41.1", "0.43.2", "v0.49", "1", "0..1", " 0.43.1 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		keeps, err := BnbKeepsInput(v)
		if v == "" || strings.HasPrefix(strings.TrimSpace(v), "v") {
			return
		}
		k2, err2 := BnbKeepsInput("v" + strings.TrimSpace(v))
		if keeps != k2 || (err == nil) != (err2 == nil) {
			t.Errorf("%q: %v, %v; with a v: %v, %v", v, keeps, err, k2, err2)
		}
		// every release that quantizes from float16 (before 0.43.0) also
		// keeps the input (before 0.43.2), and both read the same strings
		half, err3 := BnbHalfState(v)
		if (err == nil) != (err3 == nil) || half && !keeps {
			t.Errorf("%q: keeps %v, %v; half state %v, %v", v, keeps, err, half, err3)
		}
	})
}

// Releases before 0.43.0 quantize from a float16 copy (Params4bit.cuda:
// self.data.contiguous().half().cuda(device)); 0.43.0 keeps the dtype.
func TestBnbHalfState(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0.41.1": true, "0.42.0": true, "0.42": true, "0.43.0": false, "v0.43.1": false, "0.49.2": false, "1.0": false} {
		if got, err := BnbHalfState(v); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"x", "0", "0.a.1", "0.42.0.1"} {
		if _, err := BnbHalfState(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}

// Lightning Fabric's BitsandbytesPrecision replaces every nn.Linear, the
// output head too (Quant.Head); transformers keeps it. LitGPT's adapters
// on a quantized base stay in the model's dtype, with no clone and no
// casts around them (PEFT's are float32, cast to and from, and clone the
// 4-bit result).
func TestQuantizeHeadAndLitGPTAdapters(t *testing.T) {
	build := func(head, litgpt bool) *Graph {
		b := NewBuilder("t")
		b.Quant = &Quant{Format: NF4, BlockSize: 64, Compute: BF16, Head: head}
		b.Adapters = &Adapters{Rank: 2, Alpha: 4, Targets: []string{"fc"}, Native: litgpt}
		x := b.Input("x", Shape{4, 16}, BF16)
		y := b.Input("y", Shape{4}, I64)
		h := b.Linear("fc", x, 16, true)
		w := b.Param("lm_head.weight", Shape{3, 16})
		b.QuantizeHead("lm_head", w)
		b.CrossEntropy("loss", b.LinearWith("lm_head", h, w, None), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		head, litgpt bool
		loraF32      bool
		peftOps      int // fc.clone, fc.cast_input, fc.cast_output
	}{
		{false, false, true, 3},
		{true, false, true, 3},
		{true, true, false, 0},
	} {
		g := build(c.head, c.litgpt)
		for _, id := range g.Params() {
			p := g.Tensor(id)
			switch p.Name {
			case "lm_head.weight":
				if (p.Quant != nil) != c.head || p.Quant != nil && p.RequiresGrad {
					t.Errorf("head %v: lm_head quantized %v, trainable %v", c.head, p.Quant != nil, p.RequiresGrad)
				}
			case "fc.lora_A.weight", "fc.lora_B.weight":
				if f32 := p.DType == F32 && p.KeepDType; f32 != c.loraF32 {
					t.Errorf("litgpt %v: %s float32 kept = %v, want %v", c.litgpt, p.Name, f32, c.loraF32)
				}
			}
		}
		n := 0
		for _, op := range g.Ops {
			switch op.Name {
			case "fc.clone", "fc.cast_input", "fc.cast_output":
				n++
			}
		}
		if n != c.peftOps {
			t.Errorf("litgpt %v: %d of PEFT's clone and casts, want %d", c.litgpt, n, c.peftOps)
		}
	}
}

// torchao v0.1's NF4Tensor for Llama 2 7B's [11008, 4096] MLP weight: n =
// 45,088,768, b = n/64 = 704,512 absmaxes. Pieces: the nf4 table (16
// bfloat16: 32 B), scaler_mean (2 B), quantization_factor (the whole
// 256 / (2·absmax) it is a [:, 0] view of: 2b = 1,409,024 B), the int8
// scalers (b = 704,512 B) and the codes (n/2 = 22,544,384 B): 24,657,954 B,
// against bitsandbytes' nf4 with double quantization.
func TestQuantTorchaoPieces(t *testing.T) {
	q := Quant{Format: NF4, BlockSize: 64, DoubleQuant: true, Compute: BF16, Torchao: true}
	var names []string
	for _, p := range q.Pieces(11008, 4096) {
		names = append(names, p.Name)
	}
	if got := q.StoredBytes(11008, 4096); got != 24_657_954 {
		t.Errorf("stored %d bytes (%v), want 24,657,954", got, names)
	}
	if want := "nf4 scaler_mean quantization_factor quantized_scalers quantized_data"; strings.Join(names, " ") != want {
		t.Errorf("pieces %v, want %s", names, want)
	}
}
