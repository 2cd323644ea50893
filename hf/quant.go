package hf

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/suggest"
)

// quantMethods are the quantization_config.quant_method values read.
var quantMethods = []string{"awq", "bitsandbytes", "gptq"}

// parseQuant reads config.json's quantization_config: the format the
// checkpoint stores its Linear weights in (nil when there is none).
//
//   - bitsandbytes (transformers' BitsAndBytesConfig, saved by
//     save_pretrained after loading in 4 or 8 bits): load_in_4bit or
//     load_in_8bit; bnb_4bit_quant_type (default "fp4"),
//     bnb_4bit_use_double_quant (default false), bnb_4bit_compute_dtype
//     (default float32), llm_int8_skip_modules. The block is Params4bit's
//     default, 64 (the config has no field for it). Configs written before
//     quant_method existed have load_in_4bit / load_in_8bit alone.
//   - gptq (GPTQConfig): bits (required), group_size (default 128),
//     desc_act (default false).
//   - awq (AwqConfig): bits (default 4), group_size (default 128),
//     version (default "gemm"; only GEMM's layout is modelled),
//     modules_to_not_convert.
func parseQuant(f *fields) *graph.Quant {
	r, ok := f.raw("quantization_config")
	if !ok {
		return nil
	}
	var m map[string]json.RawMessage
	if r[0] != '{' || json.Unmarshal(r, &m) != nil || m == nil {
		f.fail("quantization_config", "want an object, got %s", describe(r))
		return nil
	}
	sub := &fields{file: f.file, m: m, prefix: "quantization_config."}
	defer func() {
		if sub.err != nil && f.err == nil {
			f.err = sub.err
		}
	}()
	method := sub.str("quant_method", "")
	if method == "" && (sub.has("load_in_4bit") || sub.has("load_in_8bit")) {
		method = "bitsandbytes"
	}
	if sub.err != nil {
		return nil
	}
	q := &graph.Quant{Prequantized: true}
	switch method {
	case "bitsandbytes":
		in4, in8 := sub.boolean("load_in_4bit", false), sub.boolean("load_in_8bit", false)
		switch {
		case in4 && in8:
			sub.fail("load_in_4bit", "load_in_4bit and load_in_8bit are both set")
		case in8:
			q.Format, q.Bits, q.Compute = graph.Int8, 8, graph.F16
		case in4:
			q.Bits, q.BlockSize = 4, 64
			switch t := sub.str("bnb_4bit_quant_type", "fp4"); t {
			case "nf4":
				q.Format = graph.NF4
			case "fp4":
				q.Format = graph.FP4
			default:
				sub.fail("bnb_4bit_quant_type", "want \"nf4\" or \"fp4\", got %q", t)
			}
			q.DoubleQuant = sub.boolean("bnb_4bit_use_double_quant", false)
			q.Compute = graph.F32
			if s := sub.str("bnb_4bit_compute_dtype", ""); s != "" {
				d, err := graph.ParseDType(s)
				if err != nil || (d != graph.F32 && d != graph.F16 && d != graph.BF16) {
					sub.fail("bnb_4bit_compute_dtype", "want float32, float16 or bfloat16, got %q", s)
				}
				q.Compute = d
			}
		default:
			sub.fail("load_in_4bit", "neither load_in_4bit nor load_in_8bit is set")
		}
		q.Skip = sub.strings("llm_int8_skip_modules")
	case "gptq":
		q.Format, q.Compute = graph.GPTQ, graph.F16
		q.Bits = sub.size("bits", required, 8)
		q.GroupSize = groupSize(sub)
		q.DescAct = sub.boolean("desc_act", false)
	case "awq":
		q.Format, q.Compute = graph.AWQ, graph.F16
		q.Bits = sub.size("bits", 4, 8)
		q.GroupSize = groupSize(sub)
		if v := strings.ToLower(sub.str("version", "gemm")); v != "gemm" && sub.err == nil {
			sub.fail("version", "%q: only the GEMM layout is modelled (want \"gemm\")", v)
		}
		q.Skip = sub.strings("modules_to_not_convert")
	case "":
		sub.fail("quant_method", "missing (supported: %s)", strings.Join(quantMethods, ", "))
	default:
		msg := fmt.Sprintf("unknown quant_method %q", method)
		if near := suggest.Nearest(method, quantMethods, 3); len(near) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", near[0])
		}
		sub.fail("quant_method", "%s (supported: %s)", msg, strings.Join(quantMethods, ", "))
	}
	if sub.err != nil {
		return nil
	}
	if err := q.Check(); err != nil {
		sub.fail(checkField(q), "%v", err)
		return nil
	}
	return q
}

// groupSize reads group_size: positive, or -1 for one group per row
// (default 128, GPTQConfig's and AwqConfig's).
func groupSize(f *fields) int64 {
	v, ok := f.int("group_size")
	if !ok {
		return 128
	}
	if v == 0 || v < -1 || v > maxWidth {
		f.fail("group_size", "want a positive group or -1, got %d", v)
	}
	return v
}

// checkField names the field a failed graph.Quant.Check is about.
func checkField(q *graph.Quant) string {
	if q.Format == graph.GPTQ || q.Format == graph.AWQ {
		return "bits"
	}
	return "quant_method"
}

// checkQuantized compares a quantized checkpoint's tensors with the
// stored format its config implies: for every quantized Linear of the
// graph, each piece graph.Quant.Pieces names (but the double
// quantization's offset, which bitsandbytes keeps in the quant_state
// JSON) must be in the checkpoint with exactly that many bytes.
func checkQuantized(g *graph.Graph, ck *Checkpoint) error {
	type loc struct {
		file string
		t    Tensor
	}
	byName := map[string]loc{}
	for _, h := range ck.Files {
		for _, t := range h.Tensors {
			byName[t.Name] = loc{h.Path, t}
		}
	}
	find := func(name string) (loc, bool) {
		if l, ok := byName[name]; ok {
			return l, true
		}
		for n, l := range byName {
			if strings.HasSuffix(name, "."+n) {
				return l, true
			}
		}
		return loc{}, false
	}
	for _, id := range g.Params() {
		p := g.Tensor(id)
		q := p.Quant
		if q == nil {
			continue
		}
		module := strings.TrimSuffix(p.Name, ".weight")
		for _, piece := range q.Pieces(p.Shape[0], p.Shape[1]) {
			if piece.Name == "weight.offset" {
				continue
			}
			name := module + "." + piece.Name
			l, ok := find(name)
			if !ok {
				return fmt.Errorf("%s: the checkpoint has no %s (%s stores %d bytes there for the [%d, %d] weight)", ck.Path, name, q.Format, piece.Bytes(), p.Shape[0], p.Shape[1])
			}
			if l.t.Bytes() != piece.Bytes() {
				return fmt.Errorf("%s: %s holds %d bytes (%s %v), but %s stores %d for the [%d, %d] weight", l.file, l.t.Name, l.t.Bytes(), l.t.DType, graph.Shape(l.t.Shape), q, piece.Bytes(), p.Shape[0], p.Shape[1])
			}
		}
	}
	return nil
}
