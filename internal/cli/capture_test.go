package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"
)

// A captured graph is a model like a zoo name: on the command line, and
// uploaded to the web page, where it gives the command line's answer.
func TestCapturedGraphSource(t *testing.T) {
	t.Parallel()
	const file = "../../testdata/capture/resnet18.bfgraph.gz"
	out := cli(t, "estimate", file, "--batch", "16", "--gpu", "t4", "--json")
	zoo := cli(t, "estimate", "resnet18", "--batch", "16", "--gpu", "t4", "--image", "32", "--json")
	// the same peaks as the zoo's builder (held op for op in validation)
	for _, key := range []string{`"peak_allocated_bytes"`, `"peak_reserved_bytes"`} {
		if a, b := field(out, key), field(zoo, key); a == "" || a != b {
			t.Errorf("%s: captured %q, zoo %q", key, a, b)
		}
	}
	ts := testServer(t, server.Options{})
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, body := servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "batch", Value: "16"}, servertest.Part{Field: "gpu", Value: "t4"},
		servertest.Part{Field: "model_file", File: "resnet18.bfgraph.gz", Data: data})
	if res.StatusCode != 200 || field(string(body), `"peak_reserved_bytes"`) != field(out, `"peak_reserved_bytes"`) {
		t.Errorf("upload: %d\n%s", res.StatusCode, body)
	}
	res, body = servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "batch", Value: "16"},
		servertest.Part{Field: "model_file", File: "m.bfgraph", Data: []byte(`{"format": "onnx"}`)})
	if res.StatusCode != 422 || !strings.Contains(string(body), "not a batchfit graph file") {
		t.Errorf("malformed upload: %d %s", res.StatusCode, body)
	}
}

// field is the value of the first "key": value in a JSON text.
func field(js, key string) string {
	i := strings.Index(js, key+":")
	if i < 0 {
		return ""
	}
	rest := strings.TrimSpace(js[i+len(key)+1:])
	if j := strings.IndexAny(rest, ",\n}"); j >= 0 {
		return rest[:j]
	}
	return rest
}

// batchfit capture FACTORY -- estimate ...: the capture, then the answer.
func TestCaptureThenEstimate(t *testing.T) {
	t.Parallel()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		if os.Getenv("BATCHFIT_REQUIRE_TORCH") != "" {
			t.Fatalf("%s has no torch, and BATCHFIT_REQUIRE_TORCH is set", py)
		}
		t.Skipf("%s has no torch", py)
	}
	out := filepath.Join(t.TempDir(), "inplace.bfgraph")
	stdout, stderr, code := run("capture", "../../examples/capture/inplace.py:make", "--python", py, "-o", out, "--", "estimate", "--batch", "64", "--gpu", "t4")
	if code != 0 || !strings.Contains(stderr, "captured") || !strings.Contains(stdout, "peak allocated") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("no graph file: %v", err)
	}
	// with --json, standard output is the JSON alone: the capture's own
	// line goes to standard error
	stdout, stderr, code = run("capture", "../../examples/capture/inplace.py:make", "--python", py, "-o", out, "--", "estimate", "--batch", "64", "--gpu", "t4", "--json")
	var js map[string]any
	if err := json.Unmarshal([]byte(stdout), &js); code != 0 || err != nil || !strings.Contains(stderr, "captured") {
		t.Errorf("--json: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
	}
	_, stderr, code = run("capture", "../../examples/capture/inplace.py:make", "--", "watch")
	if code != 2 || !strings.Contains(stderr, "want estimate, sweep, maxbatch or plan") {
		t.Errorf("capture -- watch: exit %d, %s", code, stderr)
	}
	_, stderr, code = run("capture", "nope.py:make", "--python", py, "-o", filepath.Join(t.TempDir(), "x.bfgraph"))
	if code != 1 || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing factory file: exit %d, %s", code, stderr)
	}
}
