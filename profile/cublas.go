package profile

import (
	"fmt"
	"regexp"
	"strconv"
)

// cublasConfigPattern is the expression parseChosenWorkspaceSize
// (aten/src/ATen/cuda/CublasHandlePool.cpp) iterates over the value of
// CUBLAS_WORKSPACE_CONFIG: every ":SIZE:COUNT" pair, leftmost first, not
// overlapping.
var cublasConfigPattern = regexp.MustCompile(`:([0-9]+):([0-9]+)`)

// maxCublasWorkspace bounds a parsed configuration, so that the sum cannot
// overflow; no device has this much memory.
const maxCublasWorkspace = 1 << 50

// ParseCublasWorkspaceConfig reads a CUBLAS_WORKSPACE_CONFIG value the way
// parseChosenWorkspaceSize in CublasHandlePool.cpp does: the workspace is
// the sum over the ":SIZE:COUNT" pairs of SIZE KiB × COUNT (":4096:8" is
// 32 MiB, ":16:8" 128 KiB, ":4096:2:16:8" 8 MiB + 128 KiB). ok is false
// when nothing in s matches: PyTorch then warns and keeps the default size
// for the device (CublasWorkspace). An empty s is not set (ok false, no
// error).
func ParseCublasWorkspaceConfig(s string) (bytes int64, ok bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	if len(s) > 4096 {
		return 0, false, fmt.Errorf("CUBLAS_WORKSPACE_CONFIG is %d characters long; want pairs such as :4096:8", len(s))
	}
	ms := cublasConfigPattern.FindAllStringSubmatch(s, -1)
	if len(ms) == 0 {
		return 0, false, nil
	}
	var total int64
	for _, m := range ms {
		size, err1 := strconv.ParseInt(m[1], 10, 64)
		count, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 != nil || err2 != nil || size > maxCublasWorkspace>>10 || count > maxCublasWorkspace {
			return 0, false, fmt.Errorf("CUBLAS_WORKSPACE_CONFIG %q: %s:%s is out of range", s, m[1], m[2])
		}
		n := size << 10
		if count > 0 && n > (maxCublasWorkspace-total)/count {
			return 0, false, fmt.Errorf("CUBLAS_WORKSPACE_CONFIG %q: the workspace exceeds %d bytes", s, int64(maxCublasWorkspace))
		}
		total += n * count
	}
	return total, true, nil
}

// CublasWorkspaceFor is getChosenWorkspaceSize: the size config
// (CUBLAS_WORKSPACE_CONFIG) asks for when it parses, the release's default
// for a GPU of compute capability major otherwise. A configuration that
// does not parse was reported by ParseCublasWorkspaceConfig already.
func (p *Profile) CublasWorkspaceFor(major int, config string) int64 {
	if n, ok, err := ParseCublasWorkspaceConfig(config); ok && err == nil {
		return n
	}
	return p.CublasWorkspace(major)
}
