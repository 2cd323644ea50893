package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/smi"
)

// fakeGPUs gives a fake reader, a fixed clock and an empty runs directory
// to the commands one test runs (with runHooks), and returns the
// directory.
func fakeGPUs(t *testing.T, f *smi.Fake) (hooks, string) {
	t.Helper()
	dir := t.TempDir()
	return hooks{
		openSMI: func() (smi.Reader, error) { return f, nil },
		now:     func() time.Time { return time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC) },
		zone:    time.UTC,
		runsDir: func() string { return dir },
		// 1234 is the job 'batchfit run' started; every other PID has ended
		processExists: func(pid int) bool { return pid == 1234 },
	}, dir
}

// runHooks is run with the machine's stand-ins given.
func runHooks(h hooks, args ...string) (string, string, int) {
	var out, errb strings.Builder
	code := RunWith(args, &out, &errb, Options{hooks: h})
	return out.String(), errb.String(), code
}

func i64(v int64) *int64 { return &v }

// A reading of two GPUs, one running a job that 'batchfit run' started,
// one process leaving and one appearing between readings.
func TestWatch(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	me := 1234
	a := []smi.GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", Total: 80 * gib, Used: 45 * gib, Free: 35 * gib, Util: 97, MemUtil: 61,
			Processes: []smi.Process{{PID: me, Name: "python", Used: 44 * gib}, {PID: 4242, Name: "jupyter", Used: gib}}},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", Total: 80 * gib, Used: 0, Free: 80 * gib, Util: -1, MemUtil: -1},
	}
	b := []smi.GPU{a[0], {Index: 1, Name: a[1].Name, Total: 80 * gib, Used: 2 * gib, Free: 78 * gib, Util: 3, MemUtil: 0,
		Processes: []smi.Process{{PID: 777, Used: -1}}}}
	b[0].Processes = []smi.Process{a[0].Processes[0]}
	f := &smi.Fake{Frames: [][]smi.GPU{a, b}}
	h, dir := fakeGPUs(t, f)
	st := RunState{PID: me, Command: []string{"python", "train.py"}, Args: []string{"--model", "resnet50"},
		Start: &record.Record{Kind: record.KindStart, PID: me, Torch: "2.5.1"},
		Last:  &record.Record{Kind: record.KindStep, Seq: 12, Step: 12, Reserved: i64(42 * gib), Allocated: i64(30 * gib), MaxAllocated: i64(40 * gib)}}
	js, _ := json.Marshal(st)
	os.WriteFile(filepath.Join(dir, "1.json"), js, 0o644)                                            // the file's name does not matter, the PID inside does
	os.WriteFile(filepath.Join(dir, "2.json"), []byte(`{"pid": 4242, "command": ["ended"]}`), 0o644) // a state left by a run that is over
	os.WriteFile(filepath.Join(dir, "3.json"), []byte(`not json`), 0o644)

	out, errs, code := runHooks(h, "watch", "--count", "2", "--interval", "10ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	path := filepath.Join("testdata", "watch.golden")
	if *update {
		os.WriteFile(path, []byte(out), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("watch output differs from %s (go test -update after checking):\n%s", path, lineDiff(path, string(want), "output", out))
	}
	// the worked-out figures: 44 GiB used by NVML − 42 GiB reserved = 2 GiB
	// outside PyTorch; the process that left and the one that came
	for _, s := range []string{
		"python   44.00 GiB    42.00 GiB         30.00 GiB  40.00 GiB      2.00 GiB         12",
		"+ process 777 (name unknown) started on GPU 1 with memory NVML cannot attribute",
		"- process 4242 (jupyter) left GPU 0, which it held 1024.00 MiB of",
		"utilisation —, memory —",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
	if !f.Closed {
		t.Error("the reader was not closed")
	}
}

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
	st := RunState{PID: me, Command: []string{"python", "train.py"}, Args: []string{"--model", "resnet18", "--batch", "64"},
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
	var fr WatchFrame
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
	h.openSMI = func() (smi.Reader, error) { return nil, smi.ErrNoDriver }
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
