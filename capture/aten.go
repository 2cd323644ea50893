package capture

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// bctx is one Build: the graph builder and where each recorded tensor
// went.
type bctx struct {
	m   *Model
	b   *graph.Builder
	n   int64 // the batch size built
	ids []graph.TensorID
	// lastUse is, per recorded tensor, the last op index reading it.
	lastUse []int
	// scope is the block being built, whose path the builder prefixes
	scope string
	// pview are views of parameters not built yet (recorded tensor →
	// the op that made it): the weight of a matmul, t(w), is read through
	// its parameter, and a view nothing else reads would count as one
	// more use of the parameter in backward.
	pview map[int]*op
	err   error
	// unknown counts the ops mapped by the default for ops without a
	// rule, per name (unknown.go)
	unknown map[string]int
	// cpu: the graph is for the CPU kernels (graph.Config.CPU): a
	// recurrent module keeps its per-timestep ops (rnn.go)
	cpu bool
	// noCache: use_cache off (graph.Config.NoCache, releaseOutput)
	noCache bool
	// inner: the innermost repeated modules are the blocks
	// (graph.Config.InnerBlocks, blockModules)
	inner bool
	// leafBias: the library's gradient checkpointing is on
	// (graph.Config.LibraryCheckpointing), under which these modules'
	// zero position biases are leaves (positionBiasLeaf), by module path
	leafBias map[string]bool
	// saved are the recorded storages autograd saved a tensor of
	// (savedUntilBackward)
	saved map[int]bool
	// pythonFrees: the capture noted when Python let go of saved tensors
	// too (savedUntilBackward)
	pythonFrees bool
}

// pythonFrees reports whether the capture noted when Python let go of
// the tensors autograd saved: bfcapture.py's producer "capture" 2 and
// later pack an alias of each (Recorder.pack).
func (m *Model) pythonFrees() bool {
	var p struct {
		Capture int `json:"capture"`
	}
	_ = json.Unmarshal(m.f.Producer, &p)
	return p.Capture >= 2
}

// savedUntilBackward reports whether the recording could not tell when
// Python let go of recorded tensor i: autograd saved its storage, and its
// finalizer ran only when backward released it (bfcapture.py notes every
// free up to the end of loss.backward() against the last op), or not
// before the recording ended. PyTorch keeps a tensor's Python object alive
// while C++ holds the tensor, as a node's SavedVariable does, so no
// earlier free is seen. Without checkpointing nothing changes whatever
// Python did, autograd holding the storage to backward; in a checkpointed
// region nothing holds it for backward (the checkpoint's pack hook keeps a
// _Holder, not the tensor), and Python's temporaries and the locals of the
// layer's functions have let go of it by the time the layer returns: it
// goes at its last use. Held to the end of the forward instead, every such
// tensor of every checkpointed layer stayed alive until the loss.
//
// A capture made by bfcapture.py's producer "capture" 2 or later saw
// every free: its pack hook hands autograd an alias of the saved tensor,
// so the tensor's Python object, and its finalizer, go when Python lets
// go of it (pythonFrees). Its frees are taken as recorded: a layer
// function's locals (a query, a key, a value) live until the function
// returns or rebinds them, not to their last use.
func (x *bctx) savedUntilBackward(i int) bool {
	t := &x.m.f.Tensors[i]
	if !x.saved[t.Storage] || x.pythonFrees {
		return false
	}
	return t.FreedAfter == nil || *t.FreedAfter == len(x.m.f.Ops)-1
}

// positionBiasLeaf are transformers' attention classes whose forward, in
// training under gradient checkpointing, makes the torch.zeros position
// bias of an attention without a relative_attention_bias a leaf that
// requires grad: "if self.gradient_checkpointing and self.training:
// position_bias.requires_grad = True" (transformers 4.44: modeling_t5.py
// T5Attention.forward, and the classes copied from it in modeling_mt5.py,
// modeling_longt5.py, modeling_switch_transformers.py, modeling_udop.py,
// modeling_pix2struct.py, modeling_pop2piano.py). That zeros is the only
// one these forwards make. gradient_checkpointing_enable sets the flag on
// every module that has it (modeling_utils.py,
// _set_gradient_checkpointing).
var positionBiasLeaf = map[string]bool{
	"T5Attention": true, "MT5Attention": true, "LongT5Attention": true, "LongT5LocalAttention": true,
	"SwitchTransformersAttention": true, "UdopAttention": true, "Pix2StructVisionAttention": true,
	"Pix2StructTextAttention": true, "Pop2PianoAttention": true,
}

// ruleError is the one-line refusal of an op batchfit has no rule for.
func (c *bctx) ruleError(o *op, why string) error {
	mod := fmt.Sprintf("%q", o.Module)
	if o.Module == "" {
		// the model itself: its path is empty, so it is named by its class
		typ := "?"
		for _, m := range c.m.f.Modules {
			if m.Path == "" {
				typ = m.Type
			}
		}
		mod = "<root: " + typ + ">"
	}
	msg := fmt.Sprintf("capture: %s: op %s (module %s) has no rule in batchfit", c.m.path, o.Aten, mod)
	if why != "" {
		msg += ": " + why
	}
	return fmt.Errorf("%s", msg)
}

// Build maps the recorded graph onto the simulator's ops at c.Batch.
func (m *Model) Build(c models.Config) (*graph.Graph, error) {
	if c.Batch <= 0 {
		return nil, fmt.Errorf("%s: batch size must be positive, got %d", m.Name(), c.Batch)
	}
	if c.Layers != 0 || c.Hidden != 0 || c.Image != 0 {
		return nil, fmt.Errorf("%s: a captured model's layers, width and image size are the factory's; capture it again to change them", m.Name())
	}
	if c.TP > 1 || c.PP > 1 || c.Decode != nil {
		return nil, fmt.Errorf("%s: tensor and pipeline parallelism and generation need a model built by name (a zoo name or a Hugging Face config)", m.Name())
	}
	f := m.f
	b := graph.NewBuilder(m.Name())
	b.Adapters = c.Adapters
	x := &bctx{m: m, b: b, n: c.Batch, cpu: c.CPU, noCache: c.NoCache, inner: c.InnerBlocks, pview: map[int]*op{}, ids: make([]graph.TensorID, len(f.Tensors)), lastUse: make([]int, len(f.Tensors))}
	for i := range x.ids {
		x.ids[i] = graph.None
		x.lastUse[i] = -1
	}
	for i := range f.Ops {
		for _, t := range f.Ops[i].tensorArgs() {
			x.lastUse[t] = i
		}
	}
	x.pythonFrees = m.pythonFrees()
	if c.LibraryCheckpointing {
		x.leafBias = map[string]bool{}
		for _, md := range f.Modules {
			if positionBiasLeaf[md.Type] {
				x.leafBias[md.Path] = true
			}
		}
	}
	x.saved = map[int]bool{}
	for i := range f.Tensors {
		if len(f.Tensors[i].SavedBy) > 0 {
			x.saved[f.Tensors[i].Storage] = true
		}
	}
	conv1 := conv1dWeights(f)
	// Parameters and buffers first, in the recording's order (that of
	// model.named_parameters() and named_buffers()); then the batch.
	for i := range f.Tensors {
		t := &f.Tensors[i]
		switch t.Role {
		case "parameter":
			dt, _ := graph.ParseDType(t.DType)
			b.ParamDT = dt
			s := x.shape(t)
			if conv1[i] {
				// [out, in, k] as [out, in, 1, k]: see conv1d
				s = graph.Shape{s[0], s[1], 1, s[2]}
			}
			x.ids[i] = b.NamedParam(t.Name, s, t.RequiresGrad)
		case "buffer":
			dt, _ := graph.ParseDType(t.DType)
			x.ids[i] = b.NamedBuffer(t.Name, x.shape(t), dt)
		}
	}
	b.ParamDT = graph.F32
	for i := range f.Tensors {
		t := &f.Tensors[i]
		dt, _ := graph.ParseDType(t.DType)
		switch t.Role {
		case "input":
			x.ids[i] = b.Input(t.Name, x.shape(t), dt)
		case "target":
			x.ids[i] = b.Target(t.Name, x.shape(t), dt)
		}
	}
	blocks := blockModules(f.Modules, c.InnerBlocks)
	type callAt struct {
		module string
		op     int
	}
	calls := map[callAt]*blockCall{}
	for k := range f.Calls {
		calls[callAt{f.Calls[k].Module, f.Calls[k].Op}] = &f.Calls[k]
	}
	// group is one torch function call (or one aten op) from op i; it
	// returns where the next starts.
	group := func(i int) int {
		j := i + 1
		o := &f.Ops[i]
		if o.FnCall != 0 {
			for j < len(f.Ops) && f.Ops[j].FnCall == o.FnCall {
				j++
			}
		}
		body := func() {
			if !x.group(f.Ops[i:j]) {
				for k := i; k < j && x.err == nil && b.Err() == nil; k++ {
					x.aten(&f.Ops[k])
				}
			}
		}
		if !o.Grad {
			// torch.no_grad(), or a custom Function's forward
			b.NoGrad(body)
		} else {
			body()
		}
		if c := f.Ops[j-1].CustomCall; c != 0 && (j == len(f.Ops) || f.Ops[j].CustomCall != c) {
			x.custom(&f.Ops[j-1], c)
		}
		x.release(i, j)
		return j
	}
	ok := func() bool { return x.err == nil && b.Err() == nil }
	for i := 0; i < len(f.Ops) && ok(); {
		blk := blockOf(blocks, f.Ops[i].Module)
		if blk == "" {
			i = group(i)
			continue
		}
		// One call of a block module is one graph block, all its ops
		// together: torch.utils.checkpoint wraps the module's forward
		// whole, keeping only what the call reads from outside and
		// recomputing the rest in backward. A block per op would keep
		// every op's input instead.
		x.scope = blk
		b.Block(blk, func() {
			if call := calls[callAt{blk, i}]; call != nil {
				// what torch.utils.checkpoint would keep: every tensor
				// the call is handed (train's keepBlockInputs)
				var ts []graph.TensorID
				for _, t := range call.Args {
					if g := x.ids[t]; g != graph.None {
						ts = append(ts, g)
					}
				}
				b.Handed(ts...)
			}
			for i < len(f.Ops) && ok() && blockOf(blocks, f.Ops[i].Module) == blk {
				i = group(i)
			}
		})
		x.scope = ""
	}
	if ok() {
		x.releaseOutput()
	}
	if x.err != nil {
		return nil, x.err
	}
	if b.Err() != nil {
		return nil, fmt.Errorf("capture: %s: %w", m.path, b.Err())
	}
	if l := x.ids[*f.Loss]; l != graph.None {
		// a loss no loss rule made (binary_cross_entropy_with_logits,
		// smooth_l1_loss, a sum of several: their derivatives.yaml
		// entries) is the graph's loss as well
		b.Output(l)
	}
	g, err := b.Graph()
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %w", m.path, err)
	}
	if l := x.ids[*f.Loss]; l == graph.None {
		return nil, fmt.Errorf("capture: %s: the loss (tensor %d) was not made by any mapped op", m.path, *f.Loss)
	} else if g.Loss != l {
		g.Loss = l
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("capture: %s: %w", m.path, err)
	}
	m.noteUnknown(x.unknown)
	return g, nil
}

// custom gives a torch.autograd.Function's result its node (graph.Custom)
// once its forward's ops are built.
func (x *bctx) custom(last *op, call int) {
	var cc *customCall
	for i := range x.m.f.CustomCalls {
		if x.m.f.CustomCalls[i].Call == call {
			cc = &x.m.f.CustomCalls[i]
		}
	}
	if cc == nil || len(cc.Outputs) == 0 || cc.Outputs[0] == nil {
		x.err = x.ruleError(last, fmt.Sprintf("custom Function %s: its application was not recorded", last.Custom))
		return
	}
	if len(cc.Outputs) > 1 {
		x.err = x.ruleError(last, fmt.Sprintf("custom Function %s returns %d tensors; batchfit maps one", cc.Name, len(cc.Outputs)))
		return
	}
	var ins []graph.TensorID
	pos := map[int]int{}
	for _, t := range cc.Inputs {
		pos[t] = len(ins)
		ins = append(ins, x.in(last, t))
	}
	args := len(ins)
	var saved []int
	for _, t := range cc.Saved {
		p, ok := pos[t]
		if !ok {
			p = len(ins)
			pos[t] = p
			ins = append(ins, x.in(last, t))
		}
		saved = append(saved, p)
	}
	res := x.ids[*cc.Outputs[0]]
	if res == graph.None {
		x.err = x.ruleError(last, fmt.Sprintf("custom Function %s: its result was not made by its forward's ops", cc.Name))
		return
	}
	x.set(cc.Outputs[0], x.b.Custom(x.name(last), ins, args, saved, res))
}

// release adds a Release op for tensors whose last Python reference went
// after op end-1 but later than their last use as an operand: PyTorch frees
// a tensor when its last reference goes, as the builders' Release says.
func (x *bctx) release(start, end int) {
	var xs []graph.TensorID
	for i := range x.m.f.Tensors {
		t := &x.m.f.Tensors[i]
		if t.FreedAfter == nil || *t.FreedAfter < start || *t.FreedAfter >= end || t.Role != "activation" {
			continue
		}
		if x.lastUse[i] >= start || x.ids[i] == graph.None || x.savedUntilBackward(i) {
			continue
		}
		xs = append(xs, x.ids[i])
	}
	if len(xs) > 0 {
		x.b.Release("release", xs...)
	}
}

// releaseOutput adds a Release op after the last op (the loss) for the
// activations still alive when the recording ended: bfcapture.py keeps the
// forward's output through backward, so no finalizer ran for what the
// output holds. A training loop drops the output once it has the loss
// (loss = model(**batch).loss; transformers' Trainer.compute_loss returns
// outputs["loss"]), and the tensors the output held go then, not at their
// last use as operands. A ModelOutput holds more than the logits:
// T5ForConditionalGeneration returns past_key_values when use_cache is on,
// its default (T5Config(use_cache=True)) in training too, and each decoder
// attention puts its key and value states there
// (present_key_value_state = (key_states, value_states) in
// transformers' T5Attention.forward), alive to the forward's end although
// the matmuls read contiguous copies of them; GPT-2's presents are views
// of c_attn's output. A storage the last torch function call reads or
// makes (the logits the loss reads) lives to the end already, and one a
// parameter, buffer or input shares is not the output's to free.
//
// A tensor autograd saved is left out (savedUntilBackward).
//
// With use_cache off (graph.Config.NoCache: transformers' gradient
// checkpointing) the output holds no past_key_values, and what else a
// training forward's ModelOutput holds (loss, logits, T5's
// encoder_last_hidden_state) is made outside the repeated layers, unless
// the factory asks for output_hidden_states or output_attentions, which a
// capture does not see: the tensors a layer made are then left to go at
// their last use.
func (x *bctx) releaseOutput() {
	f := x.m.f
	if len(f.Ops) == 0 {
		return
	}
	start := len(f.Ops) - 1
	if c := f.Ops[start].FnCall; c != 0 {
		for start > 0 && f.Ops[start-1].FnCall == c {
			start--
		}
	}
	kept := map[int]bool{}
	for i := range f.Tensors {
		if f.Tensors[i].Role != "activation" {
			kept[f.Tensors[i].Storage] = true
		}
	}
	for i := start; i < len(f.Ops); i++ {
		o := &f.Ops[i]
		for _, t := range o.tensorArgs() {
			kept[f.Tensors[t].Storage] = true
		}
		for _, t := range o.Out {
			if t != nil {
				kept[f.Tensors[*t].Storage] = true
			}
		}
	}
	if x.noCache {
		blocks := blockModules(f.Modules, x.inner)
		for i := range f.Ops {
			if blockOf(blocks, f.Ops[i].Module) == "" {
				continue
			}
			for _, t := range f.Ops[i].Out {
				if t != nil && f.Tensors[*t].Role == "activation" {
					kept[f.Tensors[*t].Storage] = true
				}
			}
		}
	}
	loss := x.ids[*f.Loss]
	seen := map[graph.TensorID]bool{}
	var xs []graph.TensorID
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.FreedAfter != nil || t.Role != "activation" || kept[t.Storage] || x.savedUntilBackward(i) {
			continue
		}
		g := x.ids[i]
		if g == graph.None || g == loss || seen[g] {
			continue
		}
		seen[g] = true
		xs = append(xs, g)
	}
	if len(xs) > 0 {
		x.b.Release("output", xs...)
	}
}

// blockModules are the modules activation checkpointing wraps one at a
// time: the numbered children of a container (layers.0, layers.1, ...)
// when a container has at least two of the same type, as the builders'
// repeated blocks. Of those nested in one another, the outermost (a
// ConvNeXt's stages.N), or with inner (graph.Config.InnerBlocks) the
// innermost: timm's set_grad_checkpointing runs checkpoint_seq over each
// stage's blocks (timm/models/convnext.py ConvNeXtStage.forward,
// swin_transformer.py SwinTransformerStage.forward, efficientnet.py
// forward_features with flatten=True), one checkpoint a block, the
// stage's downsample outside.
func blockModules(ms []module, inner bool) map[string]bool {
	typ := map[string]string{}
	count := map[string]int{}
	for _, m := range ms {
		typ[m.Path] = m.Type
		i := strings.LastIndex(m.Path, ".")
		if i < 0 || !isIndex(m.Path[i+1:]) {
			continue
		}
		count[m.Path[:i]+"/"+m.Type]++
	}
	out := map[string]bool{}
	for _, m := range ms {
		i := strings.LastIndex(m.Path, ".")
		if i < 0 || !isIndex(m.Path[i+1:]) {
			continue
		}
		if count[m.Path[:i]+"/"+m.Type] >= 2 {
			out[m.Path] = true
		}
	}
	// only the outermost (innermost): a block inside (around) a block
	// is not one; decided on the candidates before any is dropped
	var drop []string
	for p := range out {
		for q := range out {
			if p == q || !strings.HasPrefix(p, q+".") {
				continue
			}
			// p is inside q
			if inner {
				drop = append(drop, q)
			} else {
				drop = append(drop, p)
			}
		}
	}
	for _, p := range drop {
		delete(out, p)
	}
	return out
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func blockOf(blocks map[string]bool, mod string) string {
	for p := mod; p != ""; {
		if blocks[p] {
			return p
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return ""
}

func (o *op) tensorArgs() []int {
	var ts []int
	add := func(as []arg) {
		for _, a := range as {
			if a.T != nil {
				ts = append(ts, *a.T)
			}
			for _, t := range a.Ts {
				if t != nil {
					ts = append(ts, *t)
				}
			}
		}
	}
	add(o.Args)
	for _, a := range o.Kwargs {
		add([]arg{a})
	}
	return ts
}

// shape is t's shape at the batch built.
func (x *bctx) shape(t *tensor) graph.Shape {
	s := make(graph.Shape, len(t.Shape))
	for i, d := range t.Shape {
		s[i] = d
		if t.Batch != nil {
			s[i] += t.Batch[i] * (x.n - x.m.b0)
		}
		if s[i] < 0 {
			s[i] = 0
		}
	}
	return s
}

// contig reports whether t's recorded strides are those of a contiguous
// tensor (sizes of 1 may have any stride, as torch's is_contiguous says).
func (x *bctx) contig(t *tensor) bool {
	s := x.shape(t)
	want := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == 1 {
			continue
		}
		st := t.Stride[i]
		if t.StrideBatch != nil {
			st += t.StrideBatch[i] * (x.n - x.m.b0)
		}
		if st != want {
			return false
		}
		want *= s[i]
	}
	return true
}

// strides are t's strides at the batch built.
func (x *bctx) strides(t *tensor) []int64 {
	if len(t.Stride) != len(t.Shape) {
		return nil
	}
	st := make([]int64, len(t.Stride))
	for i, v := range t.Stride {
		st[i] = v
		if t.StrideBatch != nil {
			st[i] += t.StrideBatch[i] * (x.n - x.m.b0)
		}
	}
	return st
}

// permOf is the order in which view r lays out the dims of its source in
// (graph.Attr.Perm): the permutation p, not the identity, with r's dim i
// of in's dim p[i] size and stride (a dim of size 1 may have any stride).
// It is nil for a view that keeps the elements' order or is no
// permutation at all (a reshape, a slice, an expand): transpose, permute
// and t are told apart by their recorded strides alone, whatever the op
// was called.
func (x *bctx) permOf(in, r *tensor) []int {
	si, so := x.shape(in), x.shape(r)
	ti, to := x.strides(in), x.strides(r)
	if len(si) != len(so) || ti == nil || to == nil {
		return nil
	}
	used := make([]bool, len(si))
	perm := make([]int, len(so))
	identity := true
	match := func(i, j int) bool {
		return !used[j] && si[j] == so[i] && (so[i] == 1 || ti[j] == to[i])
	}
	for i := range so {
		j := i
		if !match(i, j) {
			j = -1
			for k := range si {
				if match(i, k) {
					j = k
					break
				}
			}
			if j < 0 {
				return nil
			}
		}
		used[j] = true
		perm[i] = j
		identity = identity && j == i
	}
	if identity {
		return nil
	}
	return perm
}

// transposed12 reports whether t is a 4-D tensor laid out with dims 1
// and 2 swapped: its transpose(1, 2) is contiguous and it is not (the
// query of transformers' attention, a [B, L, H, D] projection viewed and
// transposed to [B, H, L, D]).
func (x *bctx) transposed12(t *tensor) bool {
	if len(t.Shape) != 4 || len(t.Stride) != 4 || x.contig(t) {
		return false
	}
	u := *t
	swap := func(v []int64) []int64 {
		if v == nil {
			return nil
		}
		w := append([]int64(nil), v...)
		w[1], w[2] = w[2], w[1]
		return w
	}
	u.Shape, u.Stride, u.Batch, u.StrideBatch = swap(t.Shape), swap(t.Stride), swap(t.Batch), swap(t.StrideBatch)
	return x.contig(&u)
}

// channelsLast reports whether t is a dense 4-D tensor with NHWC strides
// (torch's is_contiguous(memory_format=torch.channels_last), sizes of 1
// taking any stride) and not also contiguous.
func (x *bctx) channelsLast(t *tensor) bool {
	s := x.shape(t)
	if len(s) != 4 || x.contig(t) {
		return false
	}
	st := func(i int) int64 {
		v := t.Stride[i]
		if t.StrideBatch != nil {
			v += t.StrideBatch[i] * (x.n - x.m.b0)
		}
		return v
	}
	want := int64(1)
	for _, i := range []int{1, 3, 2, 0} {
		if s[i] != 1 && st(i) != want {
			return false
		}
		want *= s[i]
	}
	return true
}

// in is the graph tensor of a recorded one, or an error if no mapped op
// made it.
func (x *bctx) in(o *op, id int) graph.TensorID {
	if x.err != nil {
		return graph.None
	}
	if g := x.ids[id]; g != graph.None {
		return g
	}
	if v, ok := x.pview[id]; ok {
		// read by something else than a product: built now
		delete(x.pview, id)
		src, _ := v.Args[0].tensor()
		t := &x.m.f.Tensors[id]
		g := x.b.ViewAs(x.name(v), x.in(v, src), x.shape(t), x.contig(t))
		x.ids[id] = g
		return g
	}
	t := &x.m.f.Tensors[id]
	if t.Device == "cpu" && t.Role == "activation" && (len(t.Shape) > 0 || !x.m.wrapsNumbers()) && !strings.HasPrefix(o.Aten, "aten::lift_fresh") {
		// a tensor the model made on the host before the recording (a
		// plain attribute built in __init__ outside the meta device:
		// GPT-J's and CodeGen's embed_positions, made from torch.arange,
		// which the capture leaves on the CPU): host memory, made before
		// the step. A device op reads it only through a move to the
		// device (x.to(device), the _to_copy that follows), whose copy is
		// the device's memory, or as a 0-d CPU operand (GPT-J's
		// scale_attn, which 2.x's recording gives as a tensor and 1.13's
		// cannot tell from a Python number). (torch.tensor's data, which lift_fresh
		// reads, is made in the forward: a constant, below.)
		for i := range x.m.f.Tensors {
			if p := x.ids[i]; p != graph.None && x.m.f.Tensors[i].Role == "parameter" {
				dt, _ := graph.ParseDType(t.DType)
				g := x.b.Host(fmt.Sprintf("host%d", id), p, dt, x.shape(t)...)
				x.ids[id] = g
				return g
			}
		}
	}
	if t.Role == "activation" || t.Role == "constant" {
		// a tensor the user's code made before the recording (a mask kept
		// as a plain attribute): a constant of its shape, made where it is
		// first read
		dt, _ := graph.ParseDType(t.DType)
		like := graph.None
		for _, p := range x.ids {
			if p != graph.None {
				like = p
				break
			}
		}
		if like == graph.None {
			x.err = fmt.Errorf("capture: %s: op %s reads tensor %d, which nothing made", x.m.path, o.Aten, id)
			return graph.None
		}
		g := x.b.Const(fmt.Sprintf("const%d", id), like, dt, x.shape(t)...)
		x.ids[id] = g
		return g
	}
	x.err = fmt.Errorf("capture: %s: op %s reads tensor %d (%s), which nothing made", x.m.path, o.Aten, id, t.Role)
	return graph.None
}

// set records that graph tensor g is recorded tensor id.
func (x *bctx) set(id *int, g graph.TensorID) {
	if id != nil && g != graph.None {
		x.ids[*id] = g
		x.layout(&x.m.f.Tensors[*id], g)
	}
}

// layout gives graph tensor g the recorded strides of t where t is dense
// in another order than its dims' (graph.Tensor.Strides), the first time
// g is mapped: the tensor an op made, not a later alias of it.
func (x *bctx) layout(t *tensor, g graph.TensorID) {
	gt := x.b.TensorAt(g)
	if gt.Strides != nil || x.contig(t) {
		return
	}
	s, st := x.shape(t), x.strides(t)
	if st == nil || !slices.Equal(s, gt.Shape) || !graph.DenseStrides(s, st) {
		return
	}
	gt.Strides = st
}

func (a arg) tensor() (int, bool) {
	if a.T == nil {
		return 0, false
	}
	return *a.T, true
}

// ints reads an int or a list of ints, with the batch coefficients.
func (x *bctx) ints(a arg) ([]int64, bool) {
	if a.V == nil {
		return nil, false
	}
	var one int64
	if json.Unmarshal(a.V, &one) == nil {
		var k int64
		_ = json.Unmarshal(a.Batch, &k)
		return []int64{one + k*(x.n-x.m.b0)}, true
	}
	var many []int64
	if json.Unmarshal(a.V, &many) != nil {
		return nil, false
	}
	var ks []int64
	_ = json.Unmarshal(a.Batch, &ks)
	for i := range many {
		if i < len(ks) {
			many[i] += ks[i] * (x.n - x.m.b0)
		}
	}
	return many, true
}

func (a arg) float() (float64, bool) {
	var v float64
	if a.V == nil || json.Unmarshal(a.V, &v) != nil {
		return 0, false
	}
	return v, true
}

func (a arg) boolean() (bool, bool) {
	var v bool
	if a.V == nil || json.Unmarshal(a.V, &v) != nil {
		return false, false
	}
	return v, true
}

func (a arg) str() string {
	var v string
	if a.V != nil && json.Unmarshal(a.V, &v) == nil {
		return v
	}
	return ""
}

func (a arg) null() bool {
	return a.T == nil && a.Ts == nil && (a.V == nil || string(a.V) == "null") && a.DType == "" && a.Other == ""
}

// argAt is positional argument i, or keyword name, or the zero arg.
func argAt(as []arg, kw map[string]arg, i int, name string) (arg, bool) {
	if i < len(as) {
		return as[i], true
	}
	if a, ok := kw[name]; ok {
		return a, true
	}
	return arg{}, false
}

// pair reads a 2-D size argument (an int means both).
func (x *bctx) pair(as []arg, i int, def int64) [2]int64 {
	if i >= len(as) {
		return [2]int64{def, def}
	}
	v, ok := x.ints(as[i])
	switch {
	case !ok || len(v) == 0:
		return [2]int64{def, def}
	case len(v) == 1:
		return [2]int64{v[0], v[0]}
	}
	return [2]int64{v[0], v[1]}
}

// queryLayout is the order in memory in which the CPU flash attention
// kernel of torch 2.x lays its output out for this query: the kernel allocates the
// output like the query (torch 2.5's meta kernel for
// _scaled_dot_product_flash_attention_for_cpu is torch.empty_like(query),
// and at::empty_like with preserve_format keeps the strides of a dense
// tensor and, for a strided one that is not dense, infer_dense_strides
// keeps its dims' order by stride). Measured on 2.5.1's CPU: a query
// [B, H, L, D] cut from a packed qkv projection, as timm's Attention does
// (qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0), strides
// (3NHD, D, 3HD, 1)), gives an output of strides (NHD, D, HD, 1), whose
// transpose(1, 2) is contiguous, as a dense [B, L, H, D] query's does
// (transposed12); a contiguous query gives a contiguous output, and an
// [L, B, H, D] one (nn.MultiheadAttention's, torchvision's ViT) keeps that
// order: measured on 2.5.1 with validation/step.py, its
// permute(2, 0, 1, 3).contiguous() copies nothing.
func (x *bctx) queryLayout(t *tensor) graph.QueryLayout {
	if x.transposed12(t) {
		return graph.QueryBLHD
	}
	s := x.shape(t)
	if len(s) != 4 || len(t.Stride) != 4 || x.contig(t) || s[1] == 1 || s[2] == 1 {
		return graph.QueryBHLD
	}
	st := make([]int64, 4)
	for i := range st {
		st[i] = t.Stride[i]
		if t.StrideBatch != nil {
			st[i] += t.StrideBatch[i] * (x.n - x.m.b0)
		}
	}
	// dims in the order B, L, H, D by decreasing stride (a batch of 1
	// takes any stride): transformers' projections
	if (s[0] == 1 || st[0] > st[2]) && st[2] > st[1] && st[1] > st[3] {
		return graph.QueryBLHD
	}
	// L, B, H, D: nn.MultiheadAttention's sequence-first projection
	if (s[0] == 1 || (st[2] > st[0] && st[0] > st[1])) && st[2] > st[1] && st[1] > st[3] {
		return graph.QueryLBHD
	}
	return graph.QueryBHLD
}
