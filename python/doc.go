// Package python holds batchfit's Python front to the test suite: the
// package in python/batchfit (the API, the Trainer callback, the notebook
// view), its unit tests in python/tests, and the wheel that
// python/build_wheels.py makes, installed into a fresh virtual environment.
// There is no Go code here to import; `go test ./python` runs the Python
// side against a freshly built binary.
package python
