package hf

import "fmt"

// Note describes the model behind the graph for reports: the transformers
// class built (from architectures), the checkpoint's stored dtype and that
// its parameter count agreed with the config. The config's notes reach the
// prediction's notes through Notes, not this line.
func (m *Model) Note() string {
	var s string
	switch {
	case m.Checkpoint == nil || m.StoredDType == "":
		s = fmt.Sprintf("%s from %s (config only, no weights read)", m.Config.className(), m.Config.Path)
	case m.Config.Quant != nil:
		s = fmt.Sprintf("%s from %s: checkpoint stores %s in %d bytes of tensors (quantized pieces as the format stores them, matching the config), %d parameters", m.Config.className(), m.Config.Path, m.Config.Quant, m.StoredBytes, m.ParamCount)
	default:
		s = fmt.Sprintf("%s from %s: checkpoint stored as %s, %d parameters in its safetensors headers, matching the config", m.Config.className(), m.Config.Path, m.StoredDType, m.ParamCount)
	}
	return s
}

// Notes are the config's facts that the graph does not model or that
// decided it (Config.Notes): the prediction's notes (predict.Noter).
func (m *Model) Notes() []string { return append([]string(nil), m.Config.Notes...) }
