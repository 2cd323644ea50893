package python

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/batchfit/batchfit/version"
)

// debianPython is the interpreter with Debian's CPU PyTorch (python3-torch).
const debianPython = "/usr/bin/python3"

// need skips when what a test needs is missing, and fails instead where
// CI says it must be there (BATCHFIT_REQUIRE_TORCH, BATCHFIT_REQUIRE_PYENV).
func need(t *testing.T, ok bool, env, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv(env) != "" {
		t.Fatalf("%s is missing and %s is set", what, env)
	}
	t.Skipf("%s is missing (set %s to fail instead)", what, env)
}

func hasModule(python, mod string) bool {
	return exec.Command(python, "-c", "import "+mod).Run() == nil
}

// binary builds the command once for the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "batchfit-python-test")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "batchfit")
		cmd := exec.Command(goCmd(), "build", "-o", built, "../cmd/batchfit")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}

func goCmd() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

func unittest(t *testing.T, python, bin string, pattern string) {
	t.Helper()
	cmd := exec.Command(python, "-m", "unittest", "discover", "-s", "tests", "-p", pattern, "-v")
	cmd.Env = append(os.Environ(), "PYTHONPATH=.", "BATCHFIT_BINARY="+bin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if strings.Contains(string(out), "skipped") {
		t.Fatalf("python tests skipped where they must run:\n%s", out)
	}
}

// The API on the user's own module, the answers' types and the errors,
// in Debian's CPU PyTorch.
func TestPythonAPI(t *testing.T) {
	need(t, hasModule(debianPython, "torch"), "BATCHFIT_REQUIRE_TORCH", debianPython+" with torch")
	unittest(t, debianPython, binary(t), "test_api.py")
}

// pyenv is the interpreter BATCHFIT_PYENV names: PyTorch 2.x, Lightning
// and transformers from the package index (python/requirements-test.txt),
// which .ci/run makes.
func pyenv(t *testing.T, mods ...string) string {
	t.Helper()
	py := os.Getenv("BATCHFIT_PYENV")
	ok := py != ""
	for _, m := range mods {
		ok = ok && hasModule(py, m)
	}
	need(t, ok, "BATCHFIT_REQUIRE_PYENV", "an interpreter with "+strings.Join(mods, ", ")+" (BATCHFIT_PYENV)")
	return py
}

// The same API tests under PyTorch 2.x: the capture's 2.x paths (the
// meta device context, untyped storages) on the user's own module.
func TestPythonAPITorch2(t *testing.T) {
	unittest(t, pyenv(t, "torch"), binary(t), "test_api.py")
}

// The Trainer callback in a real one-step run of transformers' Trainer.
func TestHuggingFaceCallback(t *testing.T) {
	unittest(t, pyenv(t, "torch", "transformers"), binary(t), "test_huggingface.py")
}

// The Lightning callback in a real one-step fit.
func TestLightningCallback(t *testing.T) {
	unittest(t, pyenv(t, "torch", "lightning"), binary(t), "test_lightning.py")
}

// The linux wheel is well formed (PEP 427: every file's hash in RECORD, the
// platform tags in WHEEL and the name) and, installed into a fresh virtual
// environment without Go, runs the main job from its console script and
// reports the same version as the binary.
func TestWheel(t *testing.T) {
	need(t, hasModule(debianPython, "venv") && hasModule(debianPython, "ensurepip"), "BATCHFIT_REQUIRE_TORCH", debianPython+" with venv")
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the installed wheel is checked on linux/amd64")
	}
	dir := t.TempDir()
	bin := binary(t)
	out, err := exec.Command(debianPython, "build_wheels.py", "--out", dir, "--platform", "linux-amd64", "--binary", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("build_wheels.py: %v\n%s", err, out)
	}
	v := version.Version()
	name := fmt.Sprintf("batchfit-%s-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64.whl", v)
	wheel := filepath.Join(dir, name)
	checkWheel(t, wheel, v, []string{"manylinux_2_17_x86_64", "manylinux2014_x86_64", "musllinux_1_1_x86_64"}, "batchfit")

	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command(debianPython, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", wheel).CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	// no Go and no checkout on its PATH: only the virtual environment
	env := []string{"PATH=" + filepath.Join(venv, "bin") + ":/usr/bin:/bin", "HOME=" + dir}
	run := func(args ...string) string {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = env, dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	got := run(filepath.Join(venv, "bin", "batchfit"), "estimate", "resnet50", "--batch", "64", "--gpu", "a100-40gb")
	if !strings.Contains(got, "resnet50 · batch 64") || !strings.Contains(got, "fits") {
		t.Errorf("the installed console script's answer:\n%s", got)
	}
	if got := run(filepath.Join(venv, "bin", "batchfit"), "version"); got != "batchfit "+v+"\n" {
		t.Errorf("batchfit version = %q, want %q", got, "batchfit "+v+"\n")
	}
	if got := run(filepath.Join(venv, "bin", "python"), "-c", "import batchfit; print(batchfit.__version__)"); got != v+"\n" {
		t.Errorf("batchfit.__version__ = %q, want %q", got, v)
	}

	// The installed package's API on the user's own module, in a fresh
	// environment that sees Debian's PyTorch: the wheel's own capture
	// module and binary, no checkout.
	if !hasModule(debianPython, "torch") {
		need(t, false, "BATCHFIT_REQUIRE_TORCH", debianPython+" with torch")
	}
	tv := filepath.Join(dir, "torchvenv")
	if out, err := exec.Command(debianPython, "-m", "venv", "--system-site-packages", tv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(tv, "bin", "pip"), "install", "-q", "--no-index", wheel).CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	env = []string{"PATH=" + filepath.Join(tv, "bin") + ":/usr/bin:/bin", "HOME=" + dir}
	got = run(filepath.Join(tv, "bin", "python"), "-c", `import torch, batchfit
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
r = batchfit.estimate(m, torch.randn(4, 512), targets=torch.zeros(4, dtype=torch.long), batch_size=64, gpu="a100-40gb")
print(r.raw["param_count"], r.raw["batch_data_bytes"], batchfit.__file__.startswith(`+"'"+tv+"'"+`))`)
	// 512·1024 + 1024 + 1024·10 + 10 parameters; 64×512 float32 inputs and
	// 64 int64 targets
	if want := "535562 131584 True\n"; got != want {
		t.Errorf("the installed API on a module printed %q, want %q", got, want)
	}
}

// Every platform's wheel builds (cross-compiled, CGO off) with its tags,
// and the binary inside is an executable of that platform. It builds four
// more binaries, so it runs where BATCHFIT_WHEELS_ALL is set (CI).
func TestWheelsEveryPlatform(t *testing.T) {
	if os.Getenv("BATCHFIT_WHEELS_ALL") == "" {
		t.Skip("set BATCHFIT_WHEELS_ALL to cross-build the wheel of every platform")
	}
	dir := t.TempDir()
	cmd := exec.Command(debianPython, "build_wheels.py", "--out", dir)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(runtime.GOROOT(), "bin")+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build_wheels.py: %v\n%s", err, out)
	}
	v := version.Version()
	for _, c := range []struct {
		tags   []string
		exe    string
		format func([]byte) (string, error)
		want   string
	}{
		{[]string{"manylinux_2_17_x86_64", "manylinux2014_x86_64", "musllinux_1_1_x86_64"}, "batchfit", elfMachine, elf.EM_X86_64.String()},
		{[]string{"manylinux_2_17_aarch64", "manylinux2014_aarch64", "musllinux_1_1_aarch64"}, "batchfit", elfMachine, elf.EM_AARCH64.String()},
		{[]string{"macosx_12_0_x86_64"}, "batchfit", machoCPU, macho.CpuAmd64.String()},
		{[]string{"macosx_12_0_arm64"}, "batchfit", machoCPU, macho.CpuArm64.String()},
		{[]string{"win_amd64"}, "batchfit.exe", peMachine, "amd64"},
	} {
		name := fmt.Sprintf("batchfit-%s-py3-none-%s.whl", v, strings.Join(c.tags, "."))
		path := filepath.Join(dir, name)
		checkWheel(t, path, v, c.tags, c.exe)
		bin := readZip(t, path, "batchfit/bin/"+c.exe)
		if got, err := c.format(bin); err != nil || got != c.want {
			t.Errorf("%s: the binary is %q (%v), want %s", name, got, err, c.want)
		}
	}
}

func elfMachine(b []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	return f.Machine.String(), nil
}

func machoCPU(b []byte) (string, error) {
	f, err := macho.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	return f.Cpu.String(), nil
}

func peMachine(b []byte) (string, error) {
	f, err := pe.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	if f.Machine == pe.IMAGE_FILE_MACHINE_AMD64 {
		return "amd64", nil
	}
	return fmt.Sprintf("machine %#x", f.Machine), nil
}

func readZip(t *testing.T, path, name string) []byte {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	r, err := z.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkWheel(t *testing.T, path, v string, tags []string, exe string) {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	files := map[string][]byte{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = b
		if f.Name == "batchfit/bin/"+exe && f.Mode()&0o111 == 0 {
			t.Errorf("the binary is not executable in the wheel (%v)", f.Mode())
		}
	}
	info := "batchfit-" + v + ".dist-info/"
	for _, want := range []string{"batchfit/__init__.py", "batchfit/_bfcapture.py", "batchfit/py.typed", "batchfit/bin/" + exe, info + "METADATA", info + "WHEEL", info + "RECORD", info + "entry_points.txt", info + "LICENSE"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the wheel lacks %s", want)
		}
	}
	for _, tag := range tags {
		if !strings.Contains(string(files[info+"WHEEL"]), "Tag: py3-none-"+tag+"\n") {
			t.Errorf("WHEEL lacks the tag %s:\n%s", tag, files[info+"WHEEL"])
		}
	}
	// RECORD: name,sha256=<urlsafe base64, no padding>,size for every file
	// but itself
	lines := strings.Split(strings.TrimSpace(string(files[info+"RECORD"])), "\n")
	if len(lines) != len(files) {
		t.Errorf("RECORD has %d lines for %d files", len(lines), len(files))
	}
	for _, l := range lines {
		parts := strings.Split(l, ",")
		if len(parts) != 3 {
			t.Errorf("RECORD line %q", l)
			continue
		}
		if parts[0] == info+"RECORD" {
			continue
		}
		sum := sha256.Sum256(files[parts[0]])
		want := fmt.Sprintf("sha256=%s", base64.RawURLEncoding.EncodeToString(sum[:]))
		if parts[1] != want || parts[2] != fmt.Sprint(len(files[parts[0]])) {
			t.Errorf("RECORD %s: %s,%s; want %s,%d", parts[0], parts[1], parts[2], want, len(files[parts[0]]))
		}
	}
}
