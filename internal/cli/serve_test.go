package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"

	"github.com/batchfit/batchfit/internal/report"
)

func testServer(t testing.TB, o server.Options) *httptest.Server {
	t.Helper()
	if o.MaxUpload == 0 {
		o.MaxUpload = 64 << 20
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	o.Loopback = true
	ts := httptest.NewServer(newServer(o))
	t.Cleanup(ts.Close)
	return ts
}

func cli(t testing.TB, args ...string) string {
	t.Helper()
	out, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("batchfit %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// Every endpoint answers what the command line answers for the same
// flags, byte for byte: the page and the command line are one code path.
func TestServeAnswersAsTheCommandLine(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	svgPath := filepath.Join(t.TempDir(), "s.svg")
	cli(t, "sweep", "gpt2", "--batch", "1:8", "--gpu", "t4", "--seq", "256", "--svg", svgPath)
	sweepSVG, _ := os.ReadFile(svgPath)
	tlPath := filepath.Join(t.TempDir(), "t.svg")
	cli(t, "estimate", "resnet18", "--batch", "8", "--gpu", "t4", "--timeline", tlPath, "--json")
	timelineSVG, _ := os.ReadFile(tlPath)
	msg := "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)"
	cases := []struct {
		path string
		body map[string]any
		want string
		ct   string
	}{
		{"/api/estimate", map[string]any{"model": "resnet18", "batch": 8, "gpu": "t4"}, cli(t, "estimate", "resnet18", "--batch", "8", "--gpu", "t4", "--json"), "application/json"},
		{"/api/estimate", map[string]any{"model": "resnet18", "batch": 8, "gpu": "t4", "loop-overhead": "5ms"}, cli(t, "estimate", "resnet18", "--batch", "8", "--gpu", "t4", "--loop-overhead", "5ms", "--json"), "application/json"},
		// A job that does not fit carries the planner's suggestions.
		{"/api/estimate", map[string]any{"model": "gpt2", "batch": "32", "seq": 1024, "gpu": "a10g"}, cliExit(t, 1, "estimate", "gpt2", "--batch", "32", "--seq", "1024", "--gpu", "a10g", "--json"), "application/json"},
		{"/api/sweep", map[string]any{"model": "mlp", "batch": "1:64", "gpu": "t4", "precision": "16-mixed", "empty-cache": true}, cli(t, "sweep", "mlp", "--batch", "1:64", "--gpu", "t4", "--precision", "16-mixed", "--empty-cache", "--json"), "application/json"},
		{"/api/maxbatch", map[string]any{"model": "resnet50", "gpu": "a100-40gb"}, cli(t, "maxbatch", "resnet50", "--gpu", "a100-40gb", "--json"), "application/json"},
		{"/api/plan", map[string]any{"model": "gpt2", "seq": 1024, "gpu": "a10g", "global-batch": 64, "batch": 64, "top": 3}, cli(t, "plan", "gpt2", "--seq", "1024", "--gpu", "a10g", "--global-batch", "64", "--batch", "64", "--top", "3", "--json"), "application/json"},
		{"/api/oom", map[string]any{"message": msg}, cli(t, "oom", msg, "--json"), "application/json"},
		{"/api/sweep.svg", map[string]any{"model": "gpt2", "batch": "1:8", "gpu": "t4", "seq": 256}, string(sweepSVG), "image/svg+xml"},
		{"/api/estimate.svg", map[string]any{"model": "resnet18", "batch": 8, "gpu": "t4"}, string(timelineSVG), "image/svg+xml"},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.path, "/api/"), func(t *testing.T) {
			res, body := servertest.PostJSON(t, ts.URL+c.path, c.body)
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != c.ct {
				t.Fatalf("%d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), body)
			}
			if string(body) != c.want {
				t.Errorf("the API's answer differs from the command line's:\n%s", lineDiff("command line", c.want, "API", string(body)))
			}
		})
	}
	// A plan where nothing fits is still an answer (the command line
	// prints it, then fails).
	res, body := servertest.PostJSON(t, ts.URL+"/api/plan", map[string]any{"model": "llama3-70b", "gpu": "t4", "batch": 1})
	if res.StatusCode != 200 || !bytes.Contains(body, []byte(`"best"`)) {
		t.Errorf("plan with nothing that fits: %d %s", res.StatusCode, body)
	}
}

// Uploads are read by the same readers as files on the command line.
func TestServeUploads(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	spec, err := os.ReadFile("../../examples/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, body := servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "batch", Value: "16"}, servertest.Part{Field: "gpu", Value: "t4"},
		servertest.Part{Field: "model_file", File: "mlp.yaml", Data: spec})
	want := cli(t, "estimate", "../../examples/mlp.yaml", "--batch", "16", "--gpu", "t4", "--json")
	if res.StatusCode != 200 || strings.Replace(string(body), `"model": "mlp.yaml"`, `"model": "../../examples/mlp.yaml"`, 1) != want {
		t.Errorf("spec upload: %d\n%s\nwant\n%s", res.StatusCode, body, want)
	}

	// A Hugging Face directory: its config, under the directory's name.
	cfg, err := os.ReadFile("../../hf/testdata/configs/gpt2/config.json")
	if err != nil {
		t.Fatal(err)
	}
	res, body = servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "batch", Value: "2"}, servertest.Part{Field: "dir", Value: "gpt2"},
		servertest.Part{Field: "model_dir", File: "config.json", Data: cfg})
	want = cli(t, "estimate", "../../hf/testdata/configs/gpt2", "--batch", "2", "--json")
	// the note names where the config was read: the upload's name
	got := strings.Replace(string(body), ` from gpt2/config.json`, ` from ../../hf/testdata/configs/gpt2/config.json`, 1)
	if res.StatusCode != 200 || got != want {
		t.Errorf("directory upload: %d\n%s\nwant\n%s", res.StatusCode, body, want)
	}
	// Its safetensors header, without the data: read, and checked
	// against the config (a one-tensor checkpoint does not match GPT-2).
	hdr := []byte(`{"wte.weight":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}`)
	st := append(binaryLen(len(hdr)), hdr...)
	res, body = servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "dir", Value: "gpt2"}, servertest.Part{Field: "size:model.safetensors", Value: fmt.Sprint(len(st) + 64)},
		servertest.Part{Field: "model_dir", File: "config.json", Data: cfg}, servertest.Part{Field: "model_dir", File: "model.safetensors", Data: st})
	if res.StatusCode != 422 || !bytes.Contains(body, []byte("the checkpoint holds 16 parameters")) {
		t.Errorf("header upload: %d %s", res.StatusCode, body)
	}
	// Without the size the header's tensors run past the file's end.
	res, body = servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "dir", Value: "gpt2"},
		servertest.Part{Field: "model_dir", File: "config.json", Data: cfg}, servertest.Part{Field: "model_dir", File: "model.safetensors", Data: st})
	if res.StatusCode != 422 || !bytes.Contains(body, []byte("truncated")) || !bytes.Contains(body, []byte("model.safetensors")) {
		t.Errorf("header without its size: %d %s", res.StatusCode, body)
	}

	// A snapshot: the command line's figures, under the upload's name.
	snapPath := servertest.WriteSnapshotFixture(t)
	for _, whatIf := range []string{"expandable_segments:True", "max_split_size_mb:128"} {
		res, body = servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "alloc-conf", Value: whatIf}, servertest.Part{Field: "snapshot", File: "snap.pickle", Data: servertest.SnapshotFixture(t)})
		want = cli(t, "snapshot", snapPath, "--alloc-conf", whatIf, "--json")
		want = strings.Replace(want, `"file": `+jsonString(snapPath), `"file": "snap.pickle"`, 1)
		if res.StatusCode != 200 || string(body) != want {
			t.Errorf("snapshot upload with %s: %d\n%s\nwant\n%s", whatIf, res.StatusCode, body, want)
		}
	}
	// with a zoo model and estimate's fields, the prediction beside it,
	// as snapshot --model gives it
	res, body = servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "model", Value: "mlp"}, servertest.Part{Field: "batch", Value: "4"},
		servertest.Part{Field: "snapshot", File: "snap.pickle", Data: servertest.SnapshotFixture(t)})
	want = cli(t, "snapshot", snapPath, "--model", "mlp", "--batch", "4", "--json")
	want = strings.Replace(want, `"file": `+jsonString(snapPath), `"file": "snap.pickle"`, 1)
	if res.StatusCode != 200 || string(body) != want || !strings.Contains(want, `"prediction"`) {
		t.Errorf("snapshot upload with a model: %d\n%s\nwant\n%s", res.StatusCode, body, want)
	}
	// a model uploaded beside the snapshot, as the page sends it: the
	// same comparison as snapshot --model with the file
	spec, err = os.ReadFile("../../examples/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, body = servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "batch", Value: "4"}, servertest.Part{Field: "model_file", File: "mlp.yaml", Data: spec},
		servertest.Part{Field: "snapshot", File: "snap.pickle", Data: servertest.SnapshotFixture(t)})
	var up, cl report.SnapshotJSON
	if res.StatusCode != 200 || json.Unmarshal(body, &up) != nil || up.Prediction == nil {
		t.Fatalf("snapshot with an uploaded model: %d %s", res.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(cli(t, "snapshot", snapPath, "--model", "../../examples/mlp.yaml", "--batch", "4", "--json")), &cl); err != nil {
		t.Fatal(err)
	}
	if up.Prediction.Overall != cl.Prediction.Overall {
		t.Errorf("uploaded model: %+v, snapshot --model: %+v", up.Prediction.Overall, cl.Prediction.Overall)
	}
	res, body = servertest.PostForm(t, ts.URL+"/api/snapshot.svg", servertest.Part{Field: "snapshot", File: "snap.pickle", Data: servertest.SnapshotFixture(t)})
	if res.StatusCode != 200 || !bytes.HasPrefix(body, []byte("<svg")) {
		t.Errorf("snapshot chart: %d %.200s", res.StatusCode, body)
	}
}

func manyFields() map[string]any {
	m := map[string]any{}
	for i := 0; i < 100; i++ {
		m[fmt.Sprintf("f%d", i)] = i
	}
	return m
}

func binaryLen(n int) []byte {
	b := make([]byte, 8)
	for i := 0; i < 8; i++ {
		b[i] = byte(n >> (8 * i))
	}
	return b
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Bad requests get a status and a message that says what was wrong.
func TestServeBadInput(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{MaxUpload: 8 << 10})
	mlpSpec, err := os.ReadFile("../../examples/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		body       any // map: JSON; []servertest.Part: multipart; string: raw with ct
		ct         string
		code       int
		want       string
	}{
		{"unknown field", "/api/estimate", map[string]any{"model": "resnet18", "bach": 8}, "", 400, "did you mean batch?"},
		{"unknown model", "/api/estimate", map[string]any{"model": "resnet5O"}, "", 400, "did you mean"},
		{"a path is not a model", "/api/estimate", map[string]any{"model": "/etc/passwd"}, "", 400, `unknown model "/etc/passwd"`},
		{"output flags are the server's", "/api/estimate", map[string]any{"model": "mlp", "timeline": "/tmp/x.svg"}, "", 400, `field "timeline" cannot be set`},
		{"odd field names", "/api/estimate", map[string]any{"model": "mlp", "-batch": 3}, "", 400, "cannot be set"},
		{"a field that is a list", "/api/estimate", map[string]any{"model": []string{"mlp"}}, "", 400, "want a string, a number or true/false"},
		{"not an object", "/api/estimate", "[1, 2]", "application/json", 400, "not a JSON object"},
		{"bad value", "/api/estimate", map[string]any{"model": "mlp", "batch": -3}, "", 400, "not a positive integer"},
		{"bad precision", "/api/estimate", map[string]any{"model": "mlp", "precision": "fp8"}, "", 400, "precision"},
		{"too many steps", "/api/estimate", map[string]any{"model": "mlp", "steps": 500}, "", 400, `field "steps": 500 is outside 0…20`},
		{"too many batches", "/api/sweep", map[string]any{"model": "mlp", "batch": "1:1000:1"}, "", 400, "at most 64"},
		{"oversize upload", "/api/estimate", []servertest.Part{{Field: "model_file", File: "m.onnx", Data: make([]byte, 16<<10)}}, "", 413, "--max-upload"},
		{"malformed ONNX", "/api/estimate", []servertest.Part{{Field: "model_file", File: "m.onnx", Data: []byte("not a model")}}, "", 422, "m.onnx"},
		{"malformed spec", "/api/estimate", []servertest.Part{{Field: "model_file", File: "m.yaml", Data: []byte("layers: [")}}, "", 422, "m.yaml"},
		{"unknown file type", "/api/estimate", []servertest.Part{{Field: "model_file", File: "m.pt", Data: []byte("x")}}, "", 422, "unknown model file type"},
		{"malformed snapshot", "/api/snapshot", []servertest.Part{{Field: "snapshot", File: "s.pickle", Data: []byte("\x80\x04garbage")}}, "", 422, "s.pickle"},
		{"no snapshot", "/api/snapshot", map[string]any{}, "", 400, "no snapshot uploaded"},
		{"unknown upload", "/api/estimate", []servertest.Part{{Field: "weights", File: "w.bin", Data: []byte("x")}}, "", 400, "unknown upload"},
		{"both a file and a name", "/api/estimate", []servertest.Part{{Field: "model", Value: "mlp"}, {Field: "model_file", File: "m.yaml", Data: mlpSpec}}, "", 400, `a model was uploaded and "mlp" named too`},
		{"no message", "/api/oom", map[string]any{}, "", 400, "paste the out-of-memory message"},
		{"not an OOM message", "/api/oom", map[string]any{"message": "all is well"}, "", 422, "no CUDA out-of-memory message found"},
		{"oom with a bad batch", "/api/oom", map[string]any{"message": "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)", "model": "resnet18", "batch": "x"}, "", 400, `batch size "x" is not a positive integer`},
		{"negative top", "/api/snapshot", []servertest.Part{{Field: "top", Value: "-1"}, {Field: "snapshot", File: "s.pickle", Data: servertest.SnapshotFixture(t)}}, "", 400, "is outside 0…50"},
		{"steps in another base", "/api/estimate", map[string]any{"model": "mlp", "steps": "0x3e8"}, "", 400, `field "steps": 1000 is outside 0…20`},
		{"steps with underscores", "/api/estimate", map[string]any{"model": "mlp", "steps": "1_000"}, "", 400, `field "steps": 1000 is outside`},
		{"deep", "/api/estimate", map[string]any{"model": "gpt2", "layers": 100000}, "", 400, `field "layers": 100000 is outside 0…512`},
		{"wide", "/api/estimate", map[string]any{"model": "gpt2", "hidden": 1000000000}, "", 400, `field "hidden"`},
		{"long accumulation", "/api/estimate", map[string]any{"model": "mlp", "accumulate": 2000}, "", 400, `field "accumulate"`},
		{"a huge GPU", "/api/maxbatch", map[string]any{"model": "mlp", "gpu": "1000TB"}, "", 400, `field "gpu"`},
		{"a long search", "/api/maxbatch", map[string]any{"model": "gpt2", "solve": "layers", "limit": 100000}, "", 400, `field "limit": at most 512 when solving for layers`},
		{"a large plan", "/api/plan", map[string]any{"model": "mlp", "global-batch": 10000000}, "", 400, `field "global-batch"`},
		{"a field of another command", "/api/estimate", map[string]any{"model": "mlp", "levers": "precision"}, "", 400, `unknown field "levers"`},
		{"many fields", "/api/estimate", manyFields(), "", 400, "fields: at most 64"},
		{"oversize body", "/api/estimate", map[string]any{"model": "mlp", "torch": strings.Repeat("1", 16<<10)}, "", 413, "larger than the 8.00 KiB this server accepts"},
		{"a model upload to oom", "/api/oom", []servertest.Part{{Field: "message", Value: "x"}, {Field: "model_file", File: "m.yaml", Data: mlpSpec}}, "", 400, "oom takes no model upload"},
		{"a snapshot upload to estimate", "/api/estimate", []servertest.Part{{Field: "model", Value: "mlp"}, {Field: "snapshot", File: "s.pickle", Data: []byte("x")}}, "", 400, "estimate takes no snapshot upload"},
		{"content type", "/api/estimate", "model: mlp", "text/yaml", 400, "unsupported content type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var res *http.Response
			var body []byte
			switch b := c.body.(type) {
			case map[string]any:
				res, body = servertest.PostJSON(t, ts.URL+c.path, b)
			case []servertest.Part:
				res, body = servertest.PostForm(t, ts.URL+c.path, b...)
			case string:
				r, err := http.Post(ts.URL+c.path, c.ct, strings.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				body, _ = io.ReadAll(r.Body)
				r.Body.Close()
				res = r
			}
			var e server.APIError
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d: the error is not JSON: %s", res.StatusCode, body)
			}
			if res.StatusCode != c.code || !strings.Contains(e.Error, c.want) {
				t.Errorf("%d %q, want %d and %q", res.StatusCode, e.Error, c.code, c.want)
			}
		})
	}
	for _, c := range []struct {
		method, path string
		code         int
	}{{"GET", "/api/estimate", 405}, {"POST", "/api/models", 405}, {"GET", "/nowhere", 404}, {"GET", "/static/nothing.js", 404}} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, res.StatusCode, c.code)
		}
	}
}

// The page is served from the binary and fetches nothing from elsewhere.
func TestServePage(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	external := regexp.MustCompile(`(?i)(src|href|url)\s*[=(]\s*["']?(https?:)?//`)
	for _, p := range []string{"/", "/static/app.js", "/static/style.css"} {
		res, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || len(body) == 0 {
			t.Errorf("%s: %d", p, res.StatusCode)
		}
		if m := external.Find(body); m != nil {
			t.Errorf("%s refers outside the server: %s", p, m)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", p, csp)
		}
	}
	for _, p := range []string{"/api/models", "/api/gpus"} {
		res, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var list []map[string]any
		err = json.NewDecoder(res.Body).Decode(&list)
		res.Body.Close()
		if err != nil || len(list) < 10 {
			t.Errorf("%s: %v, %d entries", p, err, len(list))
		}
	}
}

// serve binds the loopback interface unless told otherwise, and refuses
// bad flags.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "extra"}, {"serve", "--max-upload", "lots"}, {"serve", "--workers", "0"}} {
		if _, _, code := run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if _, errs, code := run("serve", "--addr", "256.0.0.1:1"); code != 1 || !strings.Contains(errs, "listening on 256.0.0.1:1") {
		t.Errorf("bad address: exit %d: %s", code, errs)
	}
}

// A body without uploads is a few fields: a megabyte at most, whatever
// the upload limit. The body is only a little over the limit: net/http's
// server discards up to 256 KiB of an unread body before it closes the
// connection, so the client finishes writing and reads the 413 instead of
// meeting a reset connection.
func TestServeFieldsBody(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	res, body := servertest.PostJSON(t, ts.URL+"/api/oom", map[string]any{"message": strings.Repeat("x", 1<<20+4<<10)})
	if res.StatusCode != 413 || !strings.Contains(string(body), "a request without uploads is larger than 1024.00 KiB") {
		t.Errorf("%d %s", res.StatusCode, body)
	}
}

// The page is for this machine: requests for another host name (a
// rebound name of a web page's own) and posts from another site's page are
// refused, while the page's own requests and command-line tools pass.
func TestServeOrigin(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	body := `{"model":"mlp","batch":4}`
	for _, c := range []struct {
		host, origin, site string
		code               int
	}{
		{"", "", "", 200},
		{"localhost:8080", "", "", 200},
		{"", "ORIGIN", "same-origin", 200},
		{"evil.example:8080", "", "", 421},
		{"", "http://evil.example", "", 403},
		{"", "", "cross-site", 403},
		// an origin is scheme, host and port (RFC 6454): another
		// scheme, or user information before the host, is another
		// origin or none
		{"", "http://HOST", "", 200},
		{"", "https://HOST", "", 403},
		{"", "ftp://HOST", "", 403},
		{"", "http://user@HOST", "", 403},
		{"", "http://user:pw@HOST", "", 403},
		{"", "null", "", 403},
		// Fetch Metadata's tokens compare whatever their case
		{"", "", "Cross-Site", 403},
		{"", "", "CROSS-SITE", 403},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/api/estimate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin == "ORIGIN" {
			req.Header.Set("Origin", ts.URL)
		} else if c.origin != "" {
			req.Header.Set("Origin", strings.Replace(c.origin, "HOST", ts.Listener.Addr().String(), 1))
		}
		if c.site != "" {
			req.Header.Set("Sec-Fetch-Site", c.site)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.code {
			t.Errorf("host %q origin %q site %q: %d, want %d", c.host, c.origin, c.site, res.StatusCode, c.code)
		}
	}
	// the default address is the loopback interface
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !server.IsLoopback(ln.Addr()) || !strings.Contains(serveUsage, "[--addr 127.0.0.1:8080]") {
		t.Error("the default address is not the loopback interface")
	}
}

// Two hundred concurrent estimates over the loopback: every one is
// answered, with the same answer, and the heap stays bounded because at
// most workers predictions run at once.
func TestServeLoad(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("load test")
	}
	srv := newServer(server.Options{MaxUpload: 1 << 20, Workers: 2, Loopback: true})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	want := cli(t, "estimate", "resnet18", "--batch", "16", "--gpu", "t4", "--json")
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 200}}
	const n = 200
	var wg sync.WaitGroup
	var ok, wrong atomic.Int64
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client.Post(ts.URL+"/api/estimate", "application/json", strings.NewReader(`{"model":"resnet18","batch":16,"gpu":"t4"}`))
			if err != nil {
				errs <- err
				return
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			switch {
			case err != nil:
				errs <- err
			case res.StatusCode == 200 && string(body) == want:
				ok.Add(1)
			default:
				wrong.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ok.Load() != n {
		t.Errorf("%d of %d requests answered correctly, %d wrongly", ok.Load(), n, wrong.Load())
	}
	if grown := int64(peak.Load()) - int64(base.HeapAlloc); grown > 256<<20 {
		t.Errorf("the heap grew by %s under load", report.FormatBytes(grown))
	}
	if m := srv.MaxActive(); m < 1 || m > 2 {
		t.Errorf("%d requests were computed at once, with 2 workers", m)
	}
}

func BenchmarkServeEstimate(b *testing.B) {
	ts := testServer(b, server.Options{Workers: runtime.NumCPU()})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := http.Post(ts.URL+"/api/estimate", "application/json", strings.NewReader(`{"model":"resnet18","batch":16,"gpu":"t4"}`))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatal(res.Status)
			}
		}
	})
}

// Different commands answered at the same time give what each gives
// alone: no state is shared between requests (run with -race too).
func TestServeConcurrentMix(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{Workers: 4})
	reqs := []struct {
		path string
		body map[string]any
	}{
		{"/api/estimate", map[string]any{"model": "gpt2", "batch": 4, "seq": 256, "precision": "bf16-mixed"}},
		{"/api/estimate.svg", map[string]any{"model": "resnet18", "batch": 8, "accumulate": 3}},
		{"/api/sweep", map[string]any{"model": "simpleconv", "batch": "1:32", "gpu": "t4"}},
		{"/api/plan", map[string]any{"model": "gpt2", "seq": 1024, "gpu": "a10g", "global-batch": 32, "batch": 32}},
		{"/api/maxbatch", map[string]any{"model": "mlp", "gpu": "8GB", "like": "l4", "objective": "throughput"}},
	}
	want := make([][]byte, len(reqs))
	for i, r := range reqs {
		res, body := servertest.PostJSON(t, ts.URL+r.path, r.body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", r.path, res.StatusCode, body)
		}
		want[i] = body
	}
	var wg sync.WaitGroup
	for k := 0; k < 8*len(reqs); k++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b, _ := json.Marshal(reqs[i].body)
			res, err := http.Post(ts.URL+reqs[i].path, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Error(err)
				return
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !bytes.Equal(got, want[i]) {
				t.Errorf("%s answered %d, differently from alone", reqs[i].path, res.StatusCode)
			}
		}(k % len(reqs))
	}
	wg.Wait()
}
