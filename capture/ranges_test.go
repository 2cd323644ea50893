package capture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// pyenvTorch2 is the interpreter with PyTorch 2.x (BATCHFIT_PYENV, the
// environment .ci/run makes from python/requirements-test.txt); the tests
// that need torch 2.x skip without it, except where BATCHFIT_REQUIRE_PYENV
// says it must be there.
func pyenvTorch2(t *testing.T) string {
	t.Helper()
	py := os.Getenv("BATCHFIT_PYENV")
	if py == "" || exec.Command(py, "-c", "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)").Run() != nil {
		if os.Getenv("BATCHFIT_REQUIRE_PYENV") != "" {
			t.Fatal("BATCHFIT_PYENV names no interpreter with torch 2.x, and BATCHFIT_REQUIRE_PYENV is set")
		}
		t.Skip("no interpreter with torch 2.x (set BATCHFIT_PYENV; BATCHFIT_REQUIRE_PYENV to fail instead)")
	}
	return py
}

// TestRunRangesAtBuild: a model that reads a range as Python numbers while
// it is built, as timm's models read their stochastic-depth schedule
// ([x.item() for x in torch.linspace(0, drop_path_rate, depth)]), is
// captured under torch 2.x: the capture builds models in the meta device's
// context, where such a range would have no data ("Tensor.item() cannot be
// called on meta tensors"), and keeps ranges on the CPU. The weights and
// a range kept as a buffer are still on meta.
func TestRunRangesAtBuild(t *testing.T) {
	py := pyenvTorch2(t)
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	f := writeFactory(t, dir, `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rates = [x.item() for x in torch.linspace(0, 0.1, 3)]
        self.steps = torch.arange(4).tolist()
        self.register_buffer("pos", torch.arange(8, dtype=torch.float32))
        self.fc = nn.Linear(8, 10)
        assert self.fc.weight.device.type == "meta"
    def forward(self, x):
        return self.fc(x + self.pos)

def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 8), "targets": torch.zeros(batch_size, dtype=torch.long)}
`)
	out := filepath.Join(dir, "net.bfgraph")
	if _, err := Run(context.Background(), Options{Python: py, Spec: f + ":make", Out: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(out); err != nil {
		t.Fatal(err)
	}
}
