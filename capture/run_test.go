package capture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/models"
)

// torchPython is Debian's interpreter with torch; the tests that run the
// capture module skip without it, except where CI says torch must be
// there (BATCHFIT_REQUIRE_TORCH=1).
func torchPython(t testing.TB) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		if os.Getenv("BATCHFIT_REQUIRE_TORCH") != "" {
			t.Fatalf("%s has no torch, and BATCHFIT_REQUIRE_TORCH is set", py)
		}
		t.Skipf("%s has no torch", py)
	}
	return py
}

func writeFactory(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "model.py")
	if err := os.WriteFile(p, []byte("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunBatchLinear captures a model whose view sizes depend on the
// batch (x.view(4 * batch, -1)) and builds it at a batch never captured;
// the saved-tensor hooks say what nn.Linear keeps (its input and weight,
// derivatives.yaml's addmm: mat1, mat2).
func TestRunBatchLinear(t *testing.T) {
	py := torchPython(t)
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	f := writeFactory(t, dir, `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(64, 10)
    def forward(self, x):
        b = x.shape[0]
        h = self.fc(x.view(4 * b, 8))
        return self.out(h.view(b, 64))

def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 32), "targets": torch.zeros(batch_size, dtype=torch.long)}
`)
	out := filepath.Join(dir, "net.bfgraph")
	st, err := Run(context.Background(), Options{Python: py, Spec: f + ":make", Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops == 0 {
		t.Errorf("no ops reported")
	}
	m, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Tensors[g.Inputs[0]].Shape; s[0] != 10 || s[1] != 32 {
		t.Errorf("input %v at batch 10", s)
	}
	var linears int
	for _, op := range g.Ops {
		if op.Kind == "linear" {
			linears++
			if op.Name == "fc" && g.Tensors[op.Output].Shape[0] != 40 {
				t.Errorf("fc output %v, want 40 rows at batch 10", g.Tensors[op.Output].Shape)
			}
		}
	}
	if linears != 2 {
		t.Errorf("%d linear ops, want 2", linears)
	}
	// the recording: each addmm saves its input and its weight's t()
	saved := 0
	for _, tt := range m.f.Tensors {
		if len(tt.SavedBy) > 0 {
			saved++
		}
	}
	if saved < 4 {
		t.Errorf("%d tensors saved for backward in the recording, want at least 4 (two inputs, two weights)", saved)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "batchfit-capture-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestRunRefusals: a factory that fails, a model that allocates real
// memory, one whose graph depends on the batch, data-dependent code and a
// missing loss are refused in one line, with a non-zero exit of the
// module, and leave nothing behind.
func TestRunRefusals(t *testing.T) {
	py := torchPython(t)
	cases := []struct{ name, body, fn, want string }{
		{"factory raises", "def make(batch_size):\n    return 1 / 0\n", "make", "the factory failed at model.py:5: ZeroDivisionError"},
		{"no such function", "def make(batch_size):\n    pass\n", "build", "has no function 'build'"},
		{"wrong return", "def make(batch_size):\n    return 3\n", "make", "the factory returned int"},
		{"real memory", `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        big = torch.ones(1 << 21, device="cpu")
        return self.fc(x)
def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 4), "targets": torch.zeros(batch_size, dtype=torch.long)}
`, "make", "allocates real memory"},
		{"data dependent", `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        if x.sum().item() > 0:
            return self.fc(x)
        return x
def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 4), "targets": torch.zeros(batch_size, dtype=torch.long)}
`, "make", "the forward failed"},
		{"no loss", `
def make(batch_size):
    return {"model": nn.Linear(4, 4), "inputs": torch.randn(batch_size, 4)}
`, "make", "no loss"},
		{"graph depends on batch", `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        for _ in range(x.shape[0]):
            x = self.fc(x)
        return x
def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 4), "targets": torch.zeros(batch_size, dtype=torch.long)}
`, "make", "depends on the batch size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("TMPDIR", dir)
			f := writeFactory(t, dir, c.body)
			out := filepath.Join(dir, "m.bfgraph")
			_, err := Run(context.Background(), Options{Python: py, Spec: f + ":" + c.fn, Out: out})
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, c.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("the output file was written")
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != "model.py" && e.Name() != "__pycache__" {
					t.Errorf("left behind: %s", e.Name())
				}
			}
		})
	}
}

// TestRunNoTorch: an interpreter without torch is named as such.
func TestRunNoTorch(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "python")
	script := "#!/bin/sh\necho \"Traceback (most recent call last):\" >&2\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{Python: fake, Spec: "m.py:make", Out: filepath.Join(dir, "m.bfgraph")})
	if err == nil || !strings.Contains(err.Error(), "no torch module") {
		t.Fatalf("error %v, want one saying the interpreter has no torch", err)
	}
	_, err = Run(context.Background(), Options{Python: filepath.Join(dir, "nope"), Spec: "m.py:make", Out: "m.bfgraph"})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("error %v, want interpreter not found", err)
	}
}

// TestRunCancel: a cancelled capture stops the interpreter and writes
// nothing.
func TestRunCancel(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "python")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Options{Python: fake, Spec: "m.py:make", Out: filepath.Join(dir, "m.bfgraph")})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("error %v after %v, want a prompt cancellation", err, time.Since(start))
	}
}

// BenchmarkCaptureLlama3_8B captures Llama-3-8B, written in plain PyTorch
// (examples/capture/llama.py), at sequence 4096 on the meta device; it
// reports the interpreter's peak memory.
func BenchmarkCaptureLlama3_8B(b *testing.B) {
	py := torchPython(b)
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		st, err := Run(context.Background(), Options{Python: py, Spec: "../examples/capture/llama.py:make", Out: filepath.Join(dir, "llama.bfgraph"),
			Env: []string{"LLAMA_SEQ=4096"}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.MaxRSSKiB)/1024, "MiB-peak")
		b.ReportMetric(float64(st.Ops), "ops")
	}
}

// TestRunHuggingFaceDirectory captures a model directory (a config.json)
// through transformers' AutoConfig.from_pretrained and
// AutoModelForCausalLM.from_config, with input_ids and labels of
// BATCHFIT_SEQ tokens, and takes the output's .loss. Debian has no
// transformers, so a stand-in package of those two names, over a small
// torch model whose forward returns an output with .loss as transformers'
// do, checks the path: the directory found, its config read, the model
// built on meta, the sequence from the environment, the loss taken.
func TestRunHuggingFaceDirectory(t *testing.T) {
	py := torchPython(t)
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	pkg := filepath.Join(dir, "site", "transformers")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := `import json, os
import torch
import torch.nn as nn
import torch.nn.functional as F

class _Output:
    def __init__(self, loss, logits):
        self.loss, self.logits = loss, logits

class _LM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.proj = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
    def forward(self, input_ids, labels=None):
        logits = self.head(F.gelu(self.proj(self.embed(input_ids))))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
        return _Output(loss, logits)

class AutoConfig:
    @staticmethod
    def from_pretrained(path):
        with open(os.path.join(path, "config.json")) as f:
            return json.load(f)

class AutoModelForCausalLM:
    @staticmethod
    def from_config(cfg):
        return _LM(cfg)
`
	if err := os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte(stub), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "tiny-lm")
	if err := os.MkdirAll(model, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"vocab_size": 1000, "hidden_size": 64}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", filepath.Join(dir, "site"))
	t.Setenv("BATCHFIT_SEQ", "16")
	out := filepath.Join(dir, "lm.bfgraph")
	if _, err := Run(context.Background(), Options{Python: py, Spec: model, Out: out}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Tensors[g.Inputs[0]].Shape; len(s) != 2 || s[0] != 4 || s[1] != 16 {
		t.Errorf("input_ids %v at batch 4, want [4 16]", s)
	}
	if g.ParamCount() != 1000*64+64*64+64+64*1000 {
		t.Errorf("%d parameters, want the stand-in's %d", g.ParamCount(), 1000*64+64*64+64+64*1000)
	}
	var ce bool
	for _, op := range g.Ops {
		ce = ce || op.Kind == "cross_entropy"
	}
	if !ce {
		t.Error("the output's .loss (a cross-entropy) is not the graph's loss")
	}

	// without transformers, the directory gets a one-line error naming it
	t.Setenv("PYTHONPATH", "")
	if exec.Command(py, "-c", "import transformers").Run() == nil {
		return // this interpreter has the real one
	}
	_, err = Run(context.Background(), Options{Python: py, Spec: model, Out: out + "2"})
	if err == nil || !strings.Contains(err.Error(), "needs the transformers package") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v, want one line saying transformers is needed", err)
	}
}

// TestRunOutVariant: spectral_norm's power iteration (run under no_grad in
// its forward pre-hook) calls F.normalize(..., out=u), recorded as div.out
// with the out tensor among the keyword arguments: the recording's
// mutated argument is a keyword-only one, and the result is that tensor,
// no new memory (autograd refuses out= variants on what requires grad).
// A tensor made in the forward without device= fails on the meta device,
// as it would beside a GPU model, and the message says how to make it.
func TestRunOutVariant(t *testing.T) {
	py := torchPython(t)
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	f := writeFactory(t, dir, `
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.utils.spectral_norm(nn.Linear(8, 8))
        self.out = nn.Linear(8, 3)
    def forward(self, x):
        return self.out(torch.tanh(self.fc(x)))

class Host(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 8)
    def forward(self, x):
        return self.cell(x, torch.zeros(x.shape[0], 8))

def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 8), "targets": torch.zeros(batch_size, dtype=torch.long)}

def host(batch_size):
    return {"model": Host(), "inputs": torch.randn(batch_size, 8), "targets": torch.zeros(batch_size, dtype=torch.long)}
`)
	out := filepath.Join(dir, "net.bfgraph")
	if _, err := Run(context.Background(), Options{Python: py, Spec: f + ":make", Out: out}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	outs := 0
	for _, o := range m.f.Ops {
		if _, ok := o.Kwargs["out"]; ok && len(o.Mutates) > 0 && o.Mutates[0] >= len(o.Args) {
			outs++
		}
	}
	if outs == 0 {
		t.Fatal("the recording has no out= op mutating a keyword argument")
	}
	if _, err := m.Build(models.Config{Batch: 4}); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Options{Python: py, Spec: f + ":host", Out: filepath.Join(dir, "host.bfgraph")})
	if err == nil || !strings.Contains(err.Error(), "device=x.device") {
		t.Errorf("a CPU tensor beside the meta model: %v", err)
	}
}
