package hf

import "fmt"

// Note describes the checkpoint behind the model for reports: its stored
// dtype and that its parameter count agreed with the config.
func (m *Model) Note() string {
	if m.Checkpoint == nil || m.StoredDType == "" {
		return fmt.Sprintf("from %s (config only, no weights read)", m.Config.Path)
	}
	if q := m.Config.Quant; q != nil {
		return fmt.Sprintf("from %s: checkpoint stores %s in %d bytes of tensors (quantized pieces as the format stores them, matching the config), %d parameters", m.Config.Path, q, m.StoredBytes, m.ParamCount)
	}
	return fmt.Sprintf("from %s: checkpoint stored as %s, %d parameters in its safetensors headers, matching the config", m.Config.Path, m.StoredDType, m.ParamCount)
}

// Notes are the facts about the config that the graph does not model
// (Config.Notes), for the prediction's notes (predict.Noter).
func (m *Model) Notes() []string { return append([]string(nil), m.Config.Notes...) }
