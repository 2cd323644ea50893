// Package models is the built-in zoo: a registry from a model name to a
// builder of its Graph.
//
// Each member reproduces its reference implementation (torchvision's
// models, Hugging Face transformers' modeling code) op for op as PyTorch
// eager runs it in training mode: the same parameters in the same order, the
// same in-place activations, dropout and batch norm, and the same reshapes
// and copies, because what autograd saves depends on them. Parameter counts
// are checked against the reference implementations in the tests.
//
// A builder takes a Config (batch size, sequence length and, for the
// dimensions a model exposes, depth and width overrides) and returns a Graph
// with concrete shapes.
package models
