package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/internal/cli"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/internal/servertest"
)

// The browser tests drive Debian's chromium (or $BATCHFIT_CHROMIUM) through
// the DevTools protocol against a test server on the loopback: they fill
// the page's forms as a user would and check that every figure the page
// shows is the API's, formatted as the command line formats it. A
// screenshot of each page is kept in $BATCHFIT_ARTIFACTS (default: the
// system's temporary directory, batchfit-browser). Without chromium they
// skip, saying so, unless $BATCHFIT_REQUIRE_BROWSER is set (CI sets it).

func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("BATCHFIT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium is not installed, so the browser tests do not run here: apt-get install chromium (CI installs it), or set BATCHFIT_CHROMIUM"
	if os.Getenv("BATCHFIT_REQUIRE_BROWSER") != "" {
		t.Fatal(msg + " (BATCHFIT_REQUIRE_BROWSER is set)")
	}
	t.Skip(msg)
	return ""
}

// browse starts a headless chromium for the test and returns its context.
func browse(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1200, 1600),
	)
	var ctx context.Context
	// A chromium just installed has failed its first start ("chrome
	// failed to start") and started the next time: one more try.
	err := startRetried(2, func() error {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		c, cancelCtx := chromedp.NewContext(actx)
		c, cancelTime := context.WithTimeout(c, 2*time.Minute)
		cancel := func() { cancelTime(); cancelCtx(); cancelAlloc() }
		if err := chromedp.Do(c); err != nil {
			cancel()
			t.Logf("starting chromium: %v", err)
			return err
		}
		ctx = c
		t.Cleanup(cancel)
		return nil
	})
	if err != nil {
		t.Fatalf("starting chromium (tried twice): %v", err)
	}
	return ctx
}

// startRetried calls start up to tries times, until it succeeds.
func startRetried(tries int, start func() error) error {
	var err error
	for range tries {
		if err = start(); err == nil {
			return nil
		}
	}
	return err
}

// The browser's start is retried once, and only once.
func TestStartRetried(t *testing.T) {
	for _, c := range []struct {
		fails, calls int
		ok           bool
	}{{0, 1, true}, {1, 2, true}, {2, 2, false}, {5, 2, false}} {
		calls := 0
		err := startRetried(2, func() error {
			calls++
			if calls <= c.fails {
				return errors.New("chrome failed to start")
			}
			return nil
		})
		if (err == nil) != c.ok || calls != c.calls {
			t.Errorf("%d failures: %d calls, %v; want %d calls, ok %v", c.fails, calls, err, c.calls, c.ok)
		}
	}
}

func artifact(t *testing.T, name string, png []byte) {
	dir := os.Getenv("BATCHFIT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "batchfit-browser")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// shown is what the page shows for a figure: the exact value it keeps in
// a data- attribute and the text the reader sees.
type shown struct {
	Field string `json:"field"`
	Value string `json:"value"`
	Text  string `json:"text"`
}

const readFigures = `(sel) => Array.from(document.querySelectorAll(sel)).map(e => ({
	field: e.dataset.field || e.dataset.category || e.dataset.seconds || e.dataset.rate,
	value: e.dataset.bytes !== undefined ? e.dataset.bytes : (e.dataset.value || ""),
	text: e.textContent}))`

func figures(ctx context.Context, t *testing.T, sel string) []shown {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]shown](fmt.Sprintf("(%s)(%q)", readFigures, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkBytes holds every byte figure shown against the API's answer.
func checkBytes(t *testing.T, where string, got []shown, want map[string]any) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("%s: the page shows no figures", where)
	}
	for _, s := range got {
		v, ok := want[s.Field].(float64)
		if !ok {
			t.Errorf("%s: the page shows %q, which the API does not give", where, s.Field)
			continue
		}
		n := int64(v)
		if s.Value != strconv.FormatInt(n, 10) || s.Text != report.FormatBytes(n) {
			t.Errorf("%s: %s shown as %s (%q), the API says %d (%q)", where, s.Field, s.Value, s.Text, n, report.FormatBytes(n))
		}
	}
}

func apiJSON(t *testing.T, url string, body any) map[string]any {
	t.Helper()
	res, b := servertest.PostJSON(t, url, body)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, res.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func screenshot(ctx context.Context, t *testing.T, name string) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	artifact(t, name, png)
}

func TestBrowserPredict(t *testing.T) {
	ctx := browse(t)
	ts := testServer(t, 64<<20)
	ready := `#results[data-state="ready"]`
	err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL),
		chromedp.WaitVisible(ready),
		// fill the form as a user would: pick from the lists, type the
		// numbers
		chromedp.SetValue(chromedp.CSS("#model"), "gpt2"),
		chromedp.SetValue(chromedp.CSS("#gpu"), "a10g"),
		chromedp.SetValue(chromedp.CSS("#precision"), "bf16-mixed"),
		chromedp.SetValue(chromedp.CSS("#optimizer"), "adamw"),
		chromedp.SetValue(chromedp.CSS("#checkpoint"), "full"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#model").dispatchEvent(new Event("change", {bubbles: true}))`),
		chromedp.Clear(chromedp.CSS("#batch")),
		chromedp.SendKeys(chromedp.CSS("#batch"), "12"),
		chromedp.SendKeys(chromedp.CSS("#seq"), "512"),
		chromedp.Clear(chromedp.CSS("#sweep")),
		chromedp.SendKeys(chromedp.CSS("#sweep"), "1:64"),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"model":"gpt2"'][data-request*='"batch":"12"'][data-request*='"seq":"512"'][data-request*='"checkpoint":"full"'][data-request*='"gpu":"a10g"']`)),
		chromedp.WaitVisible(chromedp.CSS(`#sweep-chart svg`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-chart svg`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{"model": "gpt2", "gpu": "a10g", "batch": "12", "seq": "512", "precision": "bf16-mixed",
		"optimizer": "adamw", "accumulate": "1", "checkpoint": "full"}
	est := apiJSON(t, ts.URL+"/api/estimate", fields)
	checkBytes(t, "breakdown", figures(ctx, t, "#results [data-field]"), est)
	checkBytes(t, "at the peak", figures(ctx, t, "#at-peak [data-category]"), est["at_peak_bytes"].(map[string]any))
	if n := len(figures(ctx, t, "#at-peak [data-category]")); n == 0 {
		t.Error("no categories at the peak")
	}
	tm := est["time"].(map[string]any)
	for _, s := range figures(ctx, t, "#time [data-seconds], #time [data-rate]") {
		v, ok := tm[s.Field].(float64)
		if !ok {
			continue // tokens/s of a model without tokens
		}
		got, err := strconv.ParseFloat(s.Value, 64)
		want := report.FormatRate(v)
		if s.Field == "step_seconds" {
			want = report.FormatSeconds(v)
		}
		if err != nil || got != v || s.Text != want {
			t.Errorf("%s shown as %s (%q), the API says %v (%q)", s.Field, s.Value, s.Text, v, want)
		}
	}
	// trainable parameters: all of them, without adapters
	tp, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[data-count="trainable_param_count"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(est["param_count"].(float64)); tp != chart.Commas(n)+" of "+chart.Commas(n) {
		t.Errorf("trainable parameters shown as %q", tp)
	}
	verdict, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#verdict"), "data-fits"))
	if err != nil {
		t.Fatal(err)
	}
	if verdict.Value != fmt.Sprint(est["fits"]) {
		t.Errorf("verdict fits=%s, the API says %v", verdict.Value, est["fits"])
	}
	// the band's line is the one estimate prints for the same job
	band, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#band")))
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := run("estimate", "gpt2", "--gpu", "a10g", "--batch", "12", "--seq", "512", "--precision", "bf16-mixed",
		"--optimizer", "adamw", "--checkpoint", "full")
	if band == "" || !strings.Contains(text, band+"\n") {
		t.Errorf("the page's band line %q is not estimate's:\n%s", band, text)
	}
	// the notes are estimate's "note: …" lines (gpt2 in bf16-mixed on an
	// a10g, 8.6: SDPA's flash kernel, named for --attention auto)
	notes, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#notes")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "note: attention: ") {
		t.Errorf("the page's notes %q lack the attention kernel", notes)
	}
	for _, line := range strings.Split(strings.TrimSpace(notes), "\n") {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("the page's note %q is not estimate's:\n%s", line, text)
		}
	}

	// The charts shown are the API's charts.
	for _, c := range []struct{ sel, path, batch string }{{"#sweep-chart svg", "/api/sweep.svg", "1:64"}, {"#timeline-chart svg", "/api/estimate.svg", "12"}} {
		html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(c.sel)))
		if err != nil {
			t.Fatal(err)
		}
		shownDoc, err := chart.Inspect([]byte(html))
		if err != nil {
			t.Fatalf("%s: %v", c.sel, err)
		}
		f := map[string]any{}
		for k, v := range fields {
			f[k] = v
		}
		f["batch"] = c.batch
		res, svg := servertest.PostJSON(t, ts.URL+c.path, f)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", c.path, res.StatusCode)
		}
		apiDoc, err := chart.Inspect(svg)
		if err != nil {
			t.Fatal(err)
		}
		if shownDoc.Title != apiDoc.Title || fmt.Sprint(shownDoc.Markers) != fmt.Sprint(apiDoc.Markers) ||
			fmt.Sprint(shownDoc.Lines) != fmt.Sprint(apiDoc.Lines) || fmt.Sprint(shownDoc.Layers) != fmt.Sprint(apiDoc.Layers) {
			t.Errorf("%s: the page's chart is not the API's:\n%+v\n%+v", c.sel, shownDoc, apiDoc)
		}
	}
	screenshot(ctx, t, "predict.png")

	// Bad input shows the API's message.
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#precision"), "16-true"),
		chromedp.SetValue(chromedp.CSS("#batch"), "0"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#batch").dispatchEvent(new Event("input", {bubbles: true}))`),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="error"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status.error")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, `batch size "0" is not a positive integer`) {
		t.Errorf("error shown: %q", msg)
	}

	// LoRA from the form: GPT-2's c_attn with r = 16 trains 589,824
	// parameters (12 layers × 16 × (768 + 2304)).
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#batch"), "4"),
		chromedp.SetValue(chromedp.CSS("#lora-targets"), "c_attn"),
		chromedp.SetValue(chromedp.CSS("#lora"), "16"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#lora").dispatchEvent(new Event("input", {bubbles: true}))`),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"lora":"16"']`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	tp, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[data-count="trainable_param_count"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if tp != "589,824 of 125,029,632" {
		t.Errorf("trainable parameters with LoRA shown as %q", tp)
	}

	// QLoRA from the form: GPT-2's 48 Conv1D weights (7,077,888 elements a
	// layer, 84,934,656 in all) in NF4 with double quantization store n/2 =
	// 42,467,328 bytes of codes and n/64 = 1,327,104 uint8 absmax; each
	// weight adds 64 (code) + 4 (offset) + 1024 (nested code) bytes and a
	// float32 nested absmax per 256 blocks (c_attn 108, attn c_proj 36,
	// c_fc and mlp c_proj 144 each: 1,728 bytes a layer), 73,152 bytes
	// for the 12 layers: 43,867,584 bytes.
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#quant"), "nf4+dq"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#quant").dispatchEvent(new Event("change", {bubbles: true}))`),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"quant":"nf4"']`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-field="quantized_bytes"]`), "data-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if qb.Value != "43867584" {
		t.Errorf("quantized bytes shown as %q, want 43867584", qb.Value)
	}

	// FSDP over 8 GPUs from the form: the page shows one rank's
	// parameters, as the API computes them.
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#quant"), ""),
		chromedp.SetValue(chromedp.CSS("#lora"), "0"),
		chromedp.SetValue(chromedp.CSS("#strategy"), "fsdp"),
		chromedp.SetValue(chromedp.CSS("#gpus"), "8"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#gpus").dispatchEvent(new Event("input", {bubbles: true}))`),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"strategy":"fsdp"'][data-request*='"gpus":"8"']`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	shown, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-field="parameters_bytes"]`), "data-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	reqJSON, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#results"), "data-request"))
	if err != nil {
		t.Fatal(err)
	}
	var sent map[string]string
	if err := json.Unmarshal([]byte(reqJSON.Value), &sent); err != nil {
		t.Fatalf("data-request %q: %v", reqJSON.Value, err)
	}
	args := []string{"estimate", "--json"}
	for k, v := range sent {
		args = append(args, "--"+k+"="+v)
	}
	out, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("estimate: %s", errs)
	}
	var want report.EstimateJSON
	if err := json.Unmarshal([]byte(out), &want); err != nil {
		t.Fatal(err)
	}
	if shown.Value != strconv.FormatInt(want.ParametersBytes, 10) || want.Strategy != "fsdp" {
		t.Errorf("FSDP parameters shown %s, the command line says %d", shown.Value, want.ParametersBytes)
	}
}

func TestBrowserUploads(t *testing.T) {
	ctx := browse(t)
	ts := testServer(t, 64<<20)
	spec, err := filepath.Abs("../examples/mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap := servertest.WriteSnapshotFixture(t)
	err = chromedp.Do(ctx,
		chromedp.Navigate(ts.URL),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"]`)),
		chromedp.SetValue(chromedp.CSS("#gpu"), "t4"),
		chromedp.SetValue(chromedp.CSS("#optimizer"), "sgd"),
		chromedp.SetUploadFiles(chromedp.CSS("#model-file"), []string{spec}),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"gpu":"t4"'][data-request*='"optimizer":"sgd"']:not([data-request*='"model"'])`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status")))
	if err != nil {
		t.Fatal(err)
	}
	// the header names the spec by its name: field (examples/mlp.yaml's is mlp)
	if !strings.HasPrefix(status, "mlp · batch 32") {
		t.Errorf("status %q, want the uploaded spec's prediction", status)
	}
	data, _ := os.ReadFile(spec)
	res, body := servertest.PostForm(t, ts.URL+"/api/estimate", servertest.Part{Field: "gpu", Value: "t4"}, servertest.Part{Field: "optimizer", Value: "sgd"},
		servertest.Part{Field: "batch", Value: "32"}, servertest.Part{Field: "precision", Value: "32-true"}, servertest.Part{Field: "accumulate", Value: "1"},
		servertest.Part{Field: "checkpoint", Value: "none"}, servertest.Part{Field: "model_file", File: "mlp.yaml", Data: data})
	var est map[string]any
	if res.StatusCode != 200 || json.Unmarshal(body, &est) != nil {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	checkBytes(t, "uploaded spec", figures(ctx, t, "#results [data-field]"), est)
	screenshot(ctx, t, "upload.png")

	// An out-of-memory message, pasted.
	msg := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 3.12 GiB is reserved by PyTorch but unallocated."
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#oom-message"), msg),
		chromedp.Click(chromedp.CSS("#oom-explain")),
		chromedp.WaitVisible(chromedp.CSS(`#oom-result[data-state="ready"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	ex := apiJSON(t, ts.URL+"/api/oom", map[string]any{"message": msg})
	checkBytes(t, "oom", figures(ctx, t, "#oom-result [data-field]"), ex)
	summary, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#oom-result .verdict")))
	if err != nil {
		t.Fatal(err)
	}
	if summary != ex["summary"] {
		t.Errorf("summary %q, the API says %q", summary, ex["summary"])
	}

	// A snapshot, uploaded, then replayed under another allocator setting.
	for _, whatIf := range []string{"expandable_segments:True", "max_split_size_mb:128"} {
		err = chromedp.Do(ctx,
			chromedp.Evaluate[chromedp.Void](`document.querySelector("#snapshot-result").dataset.state = "idle"`),
			chromedp.SetValue(chromedp.CSS("#snapshot-what-if"), whatIf),
			chromedp.SetUploadFiles(chromedp.CSS("#snapshot-file"), []string{snap}),
			chromedp.WaitVisible(chromedp.CSS(`#snapshot-result[data-state="ready"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#snapshot-chart svg`)),
		)
		if err != nil {
			t.Fatal(err)
		}
		res, body = servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "alloc-conf", Value: whatIf}, servertest.Part{Field: "snapshot", File: "snap.pickle", Data: servertest.SnapshotFixture(t)})
		var sj map[string]any
		if res.StatusCode != 200 || json.Unmarshal(body, &sj) != nil {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		checkBytes(t, "snapshot with "+whatIf, figures(ctx, t, "#snapshot-result [data-field]"), sj)
		html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("#snapshot-chart svg")))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains([]byte(html), []byte("reserved with "+whatIf)) {
			t.Errorf("the snapshot chart has no line for %s", whatIf)
		}
	}
	// Beside the prediction of the job above (the uploaded spec): the
	// comparison snapshot --model makes of the same job.
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#snapshot-result").dataset.state = "idle"`),
		chromedp.Click(chromedp.CSS("#snapshot-predict")),
		chromedp.WaitVisible(chromedp.CSS(`#snapshot-result[data-state="ready"] #snapshot-prediction tr[data-phase="all"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	job, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(jobFields())`))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]string
	if err := json.Unmarshal([]byte(job), &fields); err != nil {
		t.Fatal(err)
	}
	args := []string{"snapshot", snap, "--model", spec, "--json"}
	for k, v := range fields {
		if k != "alloc-conf" {
			args = append(args, "--"+k+"="+v)
		}
	}
	var sj report.SnapshotJSON
	if err := json.Unmarshal([]byte(runOK(t, args...)), &sj); err != nil || sj.Prediction == nil {
		t.Fatalf("snapshot --model: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll("#snapshot-prediction tr[data-phase]")].map((r) => [r.dataset.phase, r.dataset.diff]))`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"all": fmt.Sprint(sj.Prediction.Overall.AllocatedDiffBytes)}
	for _, c := range sj.Prediction.Phases {
		want[c.Phase] = fmt.Sprint(c.AllocatedDiffBytes)
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("the page's comparison %v, snapshot --model's %v", rows, want)
	}
	screenshot(ctx, t, "oom-and-snapshot.png")
}

// A model directory: the page keeps config.json and the safetensors files,
// and sends a safetensors file's header alone with the file's size. The
// server here takes 64 KiB at most and the file holds 1 MiB of weights, so
// an answer about its tensors shows that only the header went.
func TestBrowserModelDirectory(t *testing.T) {
	ctx := browse(t)
	ts := testServer(t, 64<<10)
	cfg, err := os.ReadFile("../hf/testdata/configs/gpt2/config.json")
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"wte.weight":{"dtype":"F32","shape":[512,512],"data_offsets":[0,1048576]}}`
	script := fmt.Sprintf(`(async () => {
		const len = new Uint8Array(8); new DataView(len.buffer).setBigUint64(0, BigInt(%d), true);
		const st = new File([len, %q, new Uint8Array(1 << 20)], "model.safetensors");
		const files = [new File([%q], "config.json"), st, new File(["# a readme"], "README.md")];
		uploaded = await pickDir(files);
		uploaded.dir = "gpt2";
		schedule();
		return uploaded.files.map(f => f.name + ":" + f.blob.size + ":" + f.size).join(",");
	})()`, len(hdr), hdr, cfg)
	err = chromedp.Do(ctx,
		chromedp.Navigate(ts.URL),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"]`)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#results").dataset.state = "idle"`),
	)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	stSize := 8 + len(hdr) + 1<<20
	if want := fmt.Sprintf("config.json:%d:%d,model.safetensors:%d:%d", len(cfg), len(cfg), 8+len(hdr), stSize); kept != want {
		t.Errorf("the page keeps %s, want %s", kept, want)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#results[data-state="error"]`))); err != nil {
		t.Fatal(err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status.error")))
	if err != nil {
		t.Fatal(err)
	}
	// The header was read against the whole file's size, and the tensors
	// were counted against the config.
	if !strings.Contains(msg, "the checkpoint holds 262144 parameters but the GPT2LMHeadModel graph has") {
		t.Errorf("status %q", msg)
	}
}

// The page formats bytes, seconds and rates as the command line does,
// digit for digit: values near and at decimal ties, and many others.
func TestBrowserFormatting(t *testing.T) {
	ctx := browse(t)
	ts := testServer(t, 64<<20)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"]`))); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var bytesIn []int64
	for _, n := range []int64{0, 1, 1023, 1024, 1025, 1152, 1<<20 - 1, 1 << 20, 1<<20 + 1, 5*1<<20 + 5*1<<10, 1 << 30, 1<<30 + 1, 1<<30 + 5<<20, 80 << 30, 3 << 40} {
		bytesIn = append(bytesIn, n)
	}
	for i := 0; i < 1500; i++ {
		bytesIn = append(bytesIn, rng.Int64N(1<<42)>>uint(rng.IntN(40)))
	}
	var floats []float64
	for _, v := range []float64{2254.05, 4.215, 0.0005, 0.00125, 0.0105, 9.995, 10.05, 99.995, 100.5, 101.5, 1e-7, 12.345, 1234.5, 59.95, 60, 90, 3599.9, 3600, 54984} {
		floats = append(floats, v)
	}
	for i := 0; i < 1500; i++ {
		// values with few decimals sit on or next to ties
		floats = append(floats, float64(rng.IntN(100000))/math.Pow(10, float64(rng.IntN(6))), rng.Float64()*math.Pow(10, float64(rng.IntN(9)-5)))
	}
	bj, _ := json.Marshal(bytesIn)
	fj, _ := json.Marshal(floats)
	type shownAll struct {
		Bytes   []string `json:"bytes"`
		Seconds []string `json:"seconds"`
		Rates   []string `json:"rates"`
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[shownAll](fmt.Sprintf(
		`({bytes: %s.map(fmtBytes), seconds: %s.map(fmtSeconds), rates: %s.map(fmtRate)})`, bj, fj, fj)))
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, n := range bytesIn {
		if got.Bytes[i] != report.FormatBytes(n) && bad < 10 {
			bad++
			t.Errorf("%d bytes: page %q, command line %q", n, got.Bytes[i], report.FormatBytes(n))
		}
	}
	for i, v := range floats {
		if got.Seconds[i] != report.FormatSeconds(v) && bad < 20 {
			bad++
			t.Errorf("%v s: page %q, command line %q", v, got.Seconds[i], report.FormatSeconds(v))
		}
		if got.Rates[i] != report.FormatRate(v) && bad < 30 {
			bad++
			t.Errorf("rate %v: page %q, command line %q", v, got.Rates[i], report.FormatRate(v))
		}
	}
}

// testServer serves the page and its API on the loopback for the test,
// taking request bodies of at most maxUpload bytes.
func testServer(t testing.TB, maxUpload int64) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(cli.NewLoopbackHandler(maxUpload))
	t.Cleanup(ts.Close)
	return ts
}

// run is batchfit's command line, in process: its output, its errors and
// its exit status.
func run(args ...string) (stdout, stderr string, code int) {
	var out, errs bytes.Buffer
	code = cli.Run(args, &out, &errs)
	return out.String(), errs.String(), code
}

// runOK is the output of a command that must succeed.
func runOK(t testing.TB, args ...string) string {
	t.Helper()
	out, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("batchfit %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// A job that does not fit lists the planner's suggestions, each with the
// GPUs it takes in all and its samples/s per GPU as the API gives them,
// and marks the best on the job's own GPUs (same_gpus). gpt2 at batch 64
// and seq 1024 in 32-true on a 16 GB T4 keeps about 40 GB of
// activations, so it does not fit, and on one GPU every plan keeps its
// GPU count: one of them is marked.
func TestBrowserSuggestions(t *testing.T) {
	ctx := browse(t)
	ts := testServer(t, 64<<20)
	err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL),
		chromedp.WaitVisible(`#results[data-state="ready"]`),
		chromedp.SetValue(chromedp.CSS("#model"), "gpt2"),
		chromedp.SetValue(chromedp.CSS("#gpu"), "t4"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#model").dispatchEvent(new Event("change", {bubbles: true}))`),
		chromedp.Clear(chromedp.CSS("#batch")),
		chromedp.SendKeys(chromedp.CSS("#batch"), "64"),
		chromedp.SendKeys(chromedp.CSS("#seq"), "1024"),
		chromedp.WaitVisible(chromedp.CSS(`#results[data-state="ready"][data-request*='"batch":"64"'][data-request*='"seq":"1024"'][data-request*='"gpu":"t4"']`)),
		chromedp.WaitVisible(chromedp.CSS(`#suggestions li`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	req, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#results"), "data-request"))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(req.Value), &fields); err != nil {
		t.Fatal(err)
	}
	est := apiJSON(t, ts.URL+"/api/estimate", fields)
	type item struct{ GPUs, PerGPU, Same, Text string }
	items, err := chromedp.Run(ctx, chromedp.Evaluate[[]item](`[...document.querySelectorAll("#suggestions li")].map((li) => ({GPUs: li.dataset.gpusTotal, PerGPU: li.dataset.perGpu, Same: li.dataset.sameGpus, Text: li.textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	sugg, _ := est["suggestions"].([]any)
	if len(sugg) == 0 || len(items) != len(sugg) {
		t.Fatalf("the page lists %d plans, the API %d", len(items), len(sugg))
	}
	marked := 0
	for i, s := range sugg {
		p := s.(map[string]any)
		gpus, per := p["gpus_total"].(float64), p["samples_per_second_per_gpu"].(float64)
		same, _ := p["same_gpus"].(bool)
		it := items[i]
		if it.GPUs != fmt.Sprint(gpus) || it.PerGPU != strconv.FormatFloat(per, 'f', -1, 64) || it.Same != fmt.Sprint(same) {
			t.Errorf("plan %d shown with %s GPUs, %s samples/s per GPU, same GPUs %s; the API says %v, %v, %v", i+1, it.GPUs, it.PerGPU, it.Same, gpus, per, same)
		}
		if !strings.Contains(it.Text, "1 GPU,") || !strings.Contains(it.Text, report.FormatRate(per)+" samples/s per GPU") {
			t.Errorf("plan %d reads %q", i+1, it.Text)
		}
		if same {
			marked++
			if !strings.Contains(it.Text, "the best on the job's own GPUs") {
				t.Errorf("plan %d keeps the job's GPUs but reads %q", i+1, it.Text)
			}
		}
	}
	if marked != 1 {
		t.Errorf("%d plans marked as the best on the job's own GPUs, want 1", marked)
	}
}
