package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/live"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/smi"
)

// fakeGPUs gives a fake reader, a fixed clock and an empty runs directory
// to the commands one test runs (with runHooks), and returns the
// directory.
func fakeGPUs(t *testing.T, f *smi.Fake) (live.Hooks, string) {
	t.Helper()
	dir := t.TempDir()
	return live.Hooks{
		OpenSMI: func() (smi.Reader, error) { return f, nil },
		Now:     func() time.Time { return time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC) },
		Zone:    time.UTC,
		RunsDir: func() string { return dir },
		// 1234 is the job 'batchfit run' started; every other PID has ended
		ProcessExists: func(pid int) bool { return pid == 1234 },
	}, dir
}

// runHooks is run with the machine's stand-ins given.
func runHooks(h live.Hooks, args ...string) (string, string, int) {
	var out, errb strings.Builder
	code := RunWith(args, &out, &errb, Options{hooks: h})
	return out.String(), errb.String(), code
}

func i64(v int64) *int64 { return &v }

// --json prints one reading a line; --out writes the same lines, which
// validate reads as the recording of the job it saw.
func TestWatchJSON(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	me := 1234
	g := []smi.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", Total: 85520809984, Used: 5 * gib, Free: 85520809984 - 5*gib, Util: 50, MemUtil: 20,
		Processes: []smi.Process{{PID: me, Name: "python", Used: 5 * gib}}}}
	h, dir := fakeGPUs(t, &smi.Fake{Frames: [][]smi.GPU{g}})
	yes := true
	st := live.RunState{PID: me, Command: []string{"python", "train.py"}, Args: []string{"--model", "resnet18", "--batch", "64"},
		Start: &record.Record{Kind: record.KindStart, PID: me, Torch: "2.5.1", CUDA: &yes, Device: "NVIDIA H100 80GB HBM3", DeviceTotal: i64(85520809984), Capability: "9.0"},
		Last: &record.Record{Kind: record.KindStep, Seq: 3, Step: 3, Batch: i64(64), Reserved: i64(4 * gib), Allocated: i64(gib),
			MaxAllocated: i64(3 * gib), MaxReserved: i64(4 * gib)}}
	js, _ := json.Marshal(st)
	os.WriteFile(filepath.Join(dir, "x.json"), js, 0o644)
	outFile := filepath.Join(t.TempDir(), "watch.jsonl")
	out, errs, code := runHooks(h, "watch", "--count", "3", "--interval", "10ms", "--json", "--out", outFile)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	var fr live.WatchFrame
	if err := json.Unmarshal([]byte(lines[0]), &fr); err != nil {
		t.Fatal(err)
	}
	p := fr.GPUs[0].Processes[0]
	if fr.Kind != "gpus" || fr.Time != "2026-11-24T12:00:00Z" || p.PID != me || p.PyTorch == nil || *p.Outside != gib || p.Used != 5*gib {
		t.Errorf("reading %+v", fr)
	}
	saved, _ := os.ReadFile(outFile)
	if strings.TrimSpace(string(saved)) != strings.TrimSpace(out) {
		t.Error("--out does not hold what --json printed")
	}
	vout, errs, code := run("validate", outFile, "--json")
	if code != 0 {
		t.Fatalf("validate: exit %d: %s", code, errs)
	}
	if !strings.Contains(vout, `"measured_peak_allocated_bytes": 3221225472`) || !strings.Contains(vout, "resnet18 · batch 64") {
		t.Errorf("validate of a watch recording:\n%s", vout)
	}
}

func TestWatchErrors(t *testing.T) {
	t.Parallel()
	h, _ := fakeGPUs(t, &smi.Fake{Err: errors.New("GPU is lost")})
	if _, errs, code := runHooks(h, "watch", "--count", "1"); code != 1 || !strings.Contains(errs, "reading the GPUs: GPU is lost") {
		t.Errorf("exit %d: %s", code, errs)
	}
	h.OpenSMI = func() (smi.Reader, error) { return nil, smi.ErrNoDriver }
	if _, errs, code := runHooks(h, "watch"); code != 1 || !strings.Contains(errs, "no NVIDIA driver found") {
		t.Errorf("no driver: exit %d: %s", code, errs)
	}
	for _, args := range [][]string{{"watch", "--interval", "1ns"}, {"watch", "--count", "-1"}, {"watch", "extra"}} {
		if _, _, code := runHooks(h, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// On this machine NVML either works or says plainly that there is no
// driver.
func TestOpenNVML(t *testing.T) {
	t.Parallel()
	r, err := smi.Open()
	if err == nil {
		defer r.Close()
		if _, err := r.Read(); err != nil {
			t.Errorf("reading the GPUs of this machine: %v", err)
		}
		return
	}
	if !errors.Is(err, smi.ErrNoDriver) {
		t.Errorf("no driver, but the error is %v", err)
	}
}
