package train

// SingleImplementation reports an optimizer that has one implementation,
// which torch.optim's choice of for-loop, foreach or fused does not reach:
// bitsandbytes' (Optimizer2State.step runs one
// optimizer_update_8bit_blockwise or optimizer_update_32bit kernel a
// parameter, whatever the setting) and transformers' Adafactor (its step
// loops over the parameters in Python). impl is what the simulator runs it
// as: ForLoop for Adafactor; ImplDefault for bitsandbytes', whose kernels
// read no implementation, so that the setting may stay as it is.
func SingleImplementation(o Optimizer) (impl Impl, single bool) {
	switch {
	case o.Kind == Adafactor:
		return ForLoop, true
	case o.Bnb():
		return ImplDefault, true
	}
	return ImplDefault, false
}
