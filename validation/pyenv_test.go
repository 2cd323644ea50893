package validation

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// checkUnderPyenv runs script --check with the interpreter BATCHFIT_PYENV
// names (the environment .ci/run makes from python/requirements-test.txt),
// which regenerates a committed reference and compares it. Without an
// interpreter that imports every module the test is skipped, or fails
// where BATCHFIT_REQUIRE_PYENV is set (CI).
func checkUnderPyenv(t *testing.T, script string, modules ...string) {
	t.Helper()
	py := os.Getenv("BATCHFIT_PYENV")
	names := strings.Join(modules, ", ")
	if py == "" || exec.Command(py, "-c", "import "+names).Run() != nil {
		if os.Getenv("BATCHFIT_REQUIRE_PYENV") != "" {
			t.Fatalf("BATCHFIT_PYENV names no interpreter with %s, and BATCHFIT_REQUIRE_PYENV is set", names)
		}
		t.Skipf("no interpreter with %s (set BATCHFIT_PYENV; BATCHFIT_REQUIRE_PYENV to fail instead)", names)
	}
	start := time.Now()
	out, err := exec.Command(py, script, "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --check: %v\n%s", script, err, out)
	}
	t.Logf("%s(%.1f s)", out, time.Since(start).Seconds())
}
