package onnx

// SetMaxNodes lowers the node limit for a test and returns a function that
// restores it.
func SetMaxNodes(n int) (restore func()) {
	old := maxNodes
	maxNodes = n
	return func() { maxNodes = old }
}
