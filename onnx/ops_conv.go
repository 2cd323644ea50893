package onnx

// Conv and the max/average pools: the ops on the spatial dims of an NCHW
// tensor, which share the pads arithmetic (auto_pad, pads) and the output size.

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// convPads reads pads (or auto_pad) for a 2-D window op and requires them
// symmetric, as PyTorch's padding is.
func (n *nctx) convPads(in [2]int64, kernel, stride, dil [2]int64) [2]int64 {
	var pads [2]int64
	switch ap := n.s("auto_pad", "NOTSET"); ap {
	case "NOTSET", "":
		if p, ok := n.ints("pads"); ok {
			if len(p) != 4 {
				n.fail("pads %v: only 2-D padding is supported", p)
				return pads
			}
			if p[0] != p[2] || p[1] != p[3] {
				n.fail("asymmetric pads %v are not supported (PyTorch pads symmetrically)", p)
				return pads
			}
			pads = [2]int64{p[0], p[1]}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < 2; i++ {
			if stride[i] <= 0 {
				n.fail("stride %v", stride)
				return pads
			}
			outSize := (in[i] + stride[i] - 1) / stride[i]
			total := max((outSize-1)*stride[i]+dil[i]*(kernel[i]-1)+1-in[i], 0)
			if total%2 != 0 {
				n.fail("auto_pad %s needs asymmetric padding here, which is not supported", ap)
				return pads
			}
			pads[i] = total / 2
		}
	default:
		n.fail("auto_pad %q", ap)
	}
	for _, p := range pads {
		if p < 0 {
			n.fail("negative padding %v", pads)
		}
	}
	return pads
}

// spatial reads the constant H and W of a 4-D input.
func (n *nctx) spatial(x *value) [2]int64 {
	if len(x.shape) != 4 {
		n.fail("only 2-D (N, C, H, W) inputs are supported, got shape %v", x.shape)
		return [2]int64{}
	}
	h, ok1 := x.shape[2].value()
	w, ok2 := x.shape[3].value()
	if !ok1 || !ok2 {
		n.fail("the spatial size %v depends on the batch or sequence size", x.shape[2:])
	}
	return [2]int64{h, w}
}

func opConv(n *nctx) error {
	xs, x := n.act(0)
	w := n.need(1)
	bias := n.input(2)
	if n.err != nil {
		return n.err
	}
	if w.kind != kInit || w.transposeOf != nil || len(w.shape) != 4 {
		return fmt.Errorf("the weight %q must be a 4-D initializer, got shape %v", w.name, w.shape)
	}
	hw := n.spatial(x)
	wd, _ := constDims(w.shape)
	group := n.i("group", 1)
	kernel := n.pair("kernel_shape", 0)
	if kernel == [2]int64{} {
		kernel = [2]int64{wd[2], wd[3]}
	}
	stride, dil := n.pair("strides", 1), n.pair("dilations", 1)
	if n.err != nil {
		return n.err
	}
	pads := n.convPads(hw, kernel, stride, dil)
	if n.err != nil {
		return n.err
	}
	if kernel != [2]int64{wd[2], wd[3]} {
		return fmt.Errorf("kernel_shape %v does not match the weight %v", kernel, wd)
	}
	inC, ok := x.shape[1].value()
	if !ok || group <= 0 || inC != wd[1]*group {
		return fmt.Errorf("input channels %v do not match the weight %v with %d groups", x.shape[1], wd, group)
	}
	var out [2]int64
	for i := 0; i < 2; i++ {
		v, ok := convOut(hw[i], kernel[i], stride[i], pads[i], dil[i])
		if !ok {
			return fmt.Errorf("kernel %v larger than the padded input %v", kernel, hw)
		}
		out[i] = v
	}
	if bias != nil && (bias.kind != kInit || !bias.shape.equal(constShape(wd[0]))) {
		return fmt.Errorf("the bias %q must be an initializer of shape [%d]", bias.name, wd[0])
	}
	n.cv.ownParam(w)
	if bias != nil {
		n.cv.ownParam(bias)
	}
	parent, leaf := n.module(w.name)
	o := graph.Conv2dOpts{Kernel: kernel, Stride: stride, Padding: pads, Dilation: dil, Groups: group, Bias: bias != nil}
	res := n.cv.newAct(n.outName(0), shape{x.shape[0], konst(wd[0]), konst(out[0]), konst(out[1])}, x.elem, true)
	outC := wd[0]
	n.cv.emit(func(c *bctx) {
		c.set(res, scoped(c.b, parent, func() graph.TensorID { return c.b.Conv2d(leaf, c.ids[xs], outC, o) }))
	})
	n.define(0, res)
	return nil
}

func convOut(in, k, s, p, d int64) (int64, bool) {
	eff := d*(k-1) + 1
	if k <= 0 || d <= 0 || s <= 0 || in+2*p < eff {
		return 0, false
	}
	return (in+2*p-eff)/s + 1, true
}

func opPool(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	hw := n.spatial(x)
	kernel := n.pair("kernel_shape", 0)
	stride, dil := n.pair("strides", 1), n.pair("dilations", 1)
	ceil := n.i("ceil_mode", 0) != 0
	if n.err != nil {
		return n.err
	}
	pads := n.convPads(hw, kernel, stride, dil)
	if n.err != nil {
		return n.err
	}
	var out [2]int64
	for i := 0; i < 2; i++ {
		if kernel[i] <= 0 || stride[i] <= 0 || dil[i] <= 0 {
			return fmt.Errorf("kernel %v, strides %v, dilations %v", kernel, stride, dil)
		}
		eff := dil[i]*(kernel[i]-1) + 1
		num := hw[i] + 2*pads[i] - eff
		if num < 0 {
			return fmt.Errorf("kernel %v larger than the input %v", kernel, hw)
		}
		o := num/stride[i] + 1
		if ceil && num%stride[i] != 0 {
			o++
			if (o-1)*stride[i] >= hw[i]+pads[i] {
				o--
			}
		}
		out[i] = o
	}
	k := graph.MaxPool2d
	if n.op == "AveragePool" {
		k = graph.AvgPool2d
	}
	o := graph.Pool2dOpts{Kernel: kernel, Stride: stride, Padding: pads, Dilation: dil, CeilMode: ceil}
	res := n.cv.newAct(n.outName(0), shape{x.shape[0], x.shape[1], konst(out[0]), konst(out[1])}, x.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) {
		if k == graph.MaxPool2d {
			c.set(res, c.b.MaxPool2d(name, c.ids[xs], o))
		} else {
			c.set(res, c.b.AvgPool2d(name, c.ids[xs], o))
		}
	})
	n.define(0, res)
	n.ignoreFrom(1, "max pool indices")
	return nil
}
