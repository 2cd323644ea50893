package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// EagerModuleLoading reads the CUDA runtime a PyTorch build is for
// (torch.version.cuda, "11.3") and says whether that build loads every
// kernel at start-up: lazy module loading came with the CUDA 11.7 runtime
// (CUDA_MODULE_LOADING=LAZY), and PyTorch turns it on from 1.13 when the
// user has not (pytorch pull request 86509); a runtime before 11.7 has
// none. The context is then gpu.EagerContextSize.
func EagerModuleLoading(cuda string) (bool, error) {
	major, minor, ok := strings.Cut(strings.TrimSpace(cuda), ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.SplitN(minor, ".", 2)[0])
	if !ok || err1 != nil || err2 != nil || ma < 1 || mi < 0 {
		return false, fmt.Errorf("%q: want a CUDA version such as 11.3 or 12.1", cuda)
	}
	return ma < 11 || (ma == 11 && mi < 7), nil
}
