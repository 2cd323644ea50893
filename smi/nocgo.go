//go:build !cgo

package smi

import "fmt"

// Open cannot load NVML in a binary built without cgo.
func Open() (Reader, error) {
	return nil, fmt.Errorf("%w (this batchfit was built without cgo, which NVML needs)", ErrNoDriver)
}
