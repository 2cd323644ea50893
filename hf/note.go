package hf

import "fmt"

// Note describes the checkpoint behind the model for reports: its stored
// dtype and that its parameter count agreed with the config.
func (m *Model) Note() string {
	if m.Checkpoint == nil || m.StoredDType == "" {
		return fmt.Sprintf("from %s (config only, no weights read)", m.Config.Path)
	}
	return fmt.Sprintf("from %s: checkpoint stored as %s, %d parameters in its safetensors headers, matching the config", m.Config.Path, m.StoredDType, m.ParamCount)
}
