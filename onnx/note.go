package onnx

import "strings"

// Note summarizes for reports what the conversion had to assume.
func (m *Model) Note() string {
	ns := m.Notes()
	if len(ns) == 0 {
		return ""
	}
	return "ONNX import: " + strings.Join(ns, "; ")
}
