package cli

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/predict"
)

// searchedOnly is what a message says of GPUs searched without a fit.
var searchedOnly = regexp.MustCompile(`\([^()]*searched\)|the search on [^;]* stopped at --max-predictions without a fit|no plan the search found fits on [^;]*`)

// namedLarger lists the catalog GPUs other than the job's that a message
// names as holding a plan (not those it lists as searched without a fit),
// and fails the test for any no larger than the job's.
func namedLarger(t *testing.T, msg string, job string) []gpu.GPU {
	t.Helper()
	msg = searchedOnly.ReplaceAllString(msg, "")
	g0, err := gpu.Lookup(job)
	if err != nil {
		t.Fatal(err)
	}
	var out []gpu.GPU
	for _, g := range gpu.All() {
		if g.Name != job && regexp.MustCompile(`(^|[^\w-])`+regexp.QuoteMeta(g.Name)+`($|[^\w-])`).MatchString(msg) {
			if g.Capacity <= g0.Capacity {
				t.Errorf("%s is named, but it is no larger than the %s that nothing fits (%d ≤ %d bytes):\n%s", g.Name, job, g.Capacity, g0.Capacity, msg)
			}
			out = append(out, g)
		}
	}
	return out
}

// Llama-3-8B at seq 32768 trains nothing on a T4: even its float32 logits
// (the cross-entropy's input) are 32768 × 128256 × 4 bytes = 16.8 GB, more
// than the T4's 15.6 GB. Every GPU the answer names must be one on which a
// plan fits when it is simulated there: estimate on that GPU (the same
// planner, no margin, the fewest changes) fits or names a change that
// fits. The least need quoted is a simulated plan's, so it is no less than
// the logits, and any bound of the model states alone says so.
func TestNothingFitsNamesOnlySimulatedGPUs(t *testing.T) {
	t.Parallel()
	const logits = 32768 * 128256 * 4
	job := []string{"estimate", "Llama-3-8B", "--seq", "32768", "--batch", "1", "--precision", "bf16-mixed"}
	out, _, code := run(append(job, "--gpu", "t4")...)
	i := strings.Index(out, "makes it fit: ")
	if code != 1 || i < 0 {
		t.Fatalf("exit %d, no nothing-fits answer:\n%s", code, out)
	}
	msg := out[i:]
	if strings.Contains(msg, "least any plan needs") {
		t.Errorf("the least need is not said to be a simulated plan's:\n%s", msg)
	}
	need := regexp.MustCompile(`least a plan simulated in full needs is (at least )?([0-9.]+) GiB`).FindStringSubmatch(msg)
	if need == nil {
		t.Errorf("no least need of a simulated plan:\n%s", msg)
	} else if gib, err := strconv.ParseFloat(need[2], 64); err != nil || gib*(1<<30) < logits {
		t.Errorf("the least need %s GiB is below the %d bytes of the float32 logits alone:\n%s", need[2], logits, msg)
	}
	if regexp.MustCompile(`optimizer state [0-9.]+ [KMG]iB`).MatchString(msg) && !strings.Contains(msg, "for the model states alone, before any activation") {
		t.Errorf("a bound of the model states is not labelled as one:\n%s", msg)
	}
	named := namedLarger(t, msg, "t4")
	if len(named) == 0 {
		// the B200's 173.75 GiB holds bf16 weights, gradients and Adam
		// states (16 + 16 + 32 GB) with full checkpointing's 32 × 32768
		// × 4096 × 2 bytes (8.6 GB) and a few copies of the logits
		t.Errorf("no larger GPU named:\n%s", msg)
	}
	for _, g := range named {
		o, _, _ := run(append(job, "--gpu", g.Name)...)
		if !strings.Contains(o, "fits: yes") && !strings.Contains(o, "that make it fit") {
			t.Errorf("%s is named, but no plan simulated on it fits:\n%s", g.Name, o)
		}
	}
}

// Llama-3-70B at seq 131072 on 8 H100s under FSDP: a GPU the answer names
// is larger than the H100 and carries a plan that fits it with the margin
// of its own capacity (the band), device total and margin within its
// capacity; the JSON lists the same GPUs.
func TestNothingFitsNamesOnlyLargerGPUs(t *testing.T) {
	t.Parallel()
	// the levers keep the job's 8 GPUs: tensor parallelism over 64 fits
	// (each rank holds an eighth of the logits), another question than a
	// larger GPU
	args := []string{"plan", "Llama-3-70B", "--seq", "131072", "--gpus", "8", "--strategy", "fsdp", "--gpu", "h100-80gb",
		"--levers", "accumulate,precision,checkpoint,optimizer,allocator,sharding,lora,optimizer-kind"}
	out, errs, code := run(append(args, "--json")...)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var p report.PlanJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	listed := map[string]report.LargerGPUJSON{}
	for _, l := range p.LargerGPUs {
		listed[l.GPU] = l
		if !l.Plan.Fits || l.Plan.DeviceTotalBytes+l.MarginBytes > l.CapacityBytes || l.MarginBytes != predict.SafetyBand.Margin(l.CapacityBytes) {
			t.Errorf("%s: plan fits %v, device total %d + margin %d against a capacity of %d (the band's margin there %d)", l.GPU, l.Plan.Fits,
				l.Plan.DeviceTotalBytes, l.MarginBytes, l.CapacityBytes, predict.SafetyBand.Margin(l.CapacityBytes))
		}
	}
	for _, g := range namedLarger(t, errs, "h100-80gb") {
		if _, ok := listed[g.Name]; !ok {
			t.Errorf("%s is named without a plan that fits it:\n%s", g.Name, errs)
		}
	}
	if p.NeedBytes == 0 || p.NeedFrom == "" {
		t.Errorf("no least need of a simulated plan: %d from %q", p.NeedBytes, p.NeedFrom)
	}
}
