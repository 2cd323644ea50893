package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"
)

// The GPU-only rules through the command line, on the zoo's simpleconv at
// batch 8 on a T4 (compute capability 7.5): conv1 [8,3,32,32] → 32
// channels and conv2 [8,32,16,16] → 64 channels, both 3×3 padded, then
// one Linear.
func TestGPURuleFlags(t *testing.T) {
	t.Parallel()
	base := []string{"estimate", "simpleconv", "--batch", "8", "--gpu", "t4", "--json"}
	cases := []struct {
		name      string
		args      []string
		cublas    int64 // the cuBLAS workspaces: one per thread that runs a GEMM
		conv      int64 // the largest cuDNN workspace bound
		searches  int
		wantError string
	}{
		// CublasHandlePool.cpp's default below Hopper, :4096:2:16:8, for
		// the forward thread and the autograd thread, and (the 2.11
		// profile, the default) the forward thread's cuBLASLt workspace
		// of 1 MiB for the Linear's bias-fused addmm, capped at the cuBLAS
		// workspace's size; conv2's bound 8·32·9·16·16 floats = 2359296
		// bytes (conv1's is 884736).
		{"default", nil, 2*8519680 + 1<<20, 2359296, 0, ""},
		// five kernel configurations searched once each: two forwards,
		// conv2's data kernel (conv1's input is the batch), two filter
		// kernels.
		{"benchmark", []string{"--cudnn-benchmark"}, 2*8519680 + 1<<20, 2359296, 5, ""},
		{"config", []string{"--cublas-workspace-config", ":16:8"}, 3 * 16 * 1024 * 8, 2359296, 0, ""},
		{"unparsable config", []string{"--cublas-workspace-config", "abc"}, 2*8519680 + 1<<20, 2359296, 0, ""},
		{"too large", []string{"--cublas-workspace-config", ":99999999999999999999:1"}, 0, 0, 0, "out of range"},
	}
	for _, c := range cases {
		out, errs, code := run(append(append([]string(nil), base...), c.args...)...)
		if c.wantError != "" {
			if code != 2 || !strings.Contains(errs, c.wantError) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("%s: exit %d, %q; want a one-line usage error with %q", c.name, code, errs, c.wantError)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errs)
		}
		var got struct {
			Workspace int64 `json:"workspace_bytes"`
			Conv      int64 `json:"conv_workspace_bytes"`
			Searches  int   `json:"cudnn_searches"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Workspace != c.cublas || got.Conv != c.conv || got.Searches != c.searches {
			t.Errorf("%s: cuBLAS %d, cuDNN %d, searches %d; want %d, %d, %d", c.name, got.Workspace, got.Conv, got.Searches, c.cublas, c.conv, c.searches)
		}
	}
	// The text output says what the rules cannot know.
	out, _, _ := run("estimate", "simpleconv", "--batch", "8", "--gpu", "t4", "--torch", "1.13", "--cudnn-benchmark", "--cublas-workspace-config", "abc")
	for _, want := range []string{"cuDNN workspace", "upper bound", "5 cuDNN algorithm searches", "Conv_v7.cpp", `CUBLAS_WORKSPACE_CONFIG "abc" has no :SIZE:COUNT pair`, "CUDA 11.6 build", "of which libraries"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

// The web API takes the two flags as fields, and answers as the command
// line does.
func TestServeGPURuleFields(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	want := cli(t, "estimate", "simpleconv", "--batch", "8", "--gpu", "t4", "--cudnn-benchmark", "--cublas-workspace-config", ":16:8", "--json")
	res, body := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "simpleconv", "batch": 8, "gpu": "t4", "cudnn-benchmark": true, "cublas-workspace-config": ":16:8"})
	if res.StatusCode != 200 {
		t.Fatalf("%d: %s", res.StatusCode, body)
	}
	if string(body) != want {
		t.Errorf("the API's answer differs from the command line's:\n%s", lineDiff("command line", want, "API", string(body)))
	}
	if !strings.Contains(want, `"cudnn_searches": 5`) {
		t.Errorf("no searches in %s", want)
	}
}

// A flag that changes nothing for the job is said, not taken silently:
// --cudnn-benchmark on a model without convolutions, --no-sync without
// accumulation.
func TestFlagsThatChangeNothingAreSaid(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "mlp", "--batch", "8", "--cudnn-benchmark"}, "note: --cudnn-benchmark changes nothing here"},
		{[]string{"estimate", "gpt2", "--batch", "1", "--seq", "128", "--gpus", "2", "--strategy", "fsdp", "--no-sync"}, "note: --no-sync changes nothing without --accumulate"},
	} {
		out, errs, code := run(c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, no %q in\n%s%s", c.args, code, c.want, out, errs)
		}
	}
	// and not said where they do change something
	out, _, _ := run("estimate", "simpleconv", "--batch", "8", "--cudnn-benchmark")
	if strings.Contains(out, "changes nothing") {
		t.Errorf("simpleconv has convolutions:\n%s", out)
	}
}
