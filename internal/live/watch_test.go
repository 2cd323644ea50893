package live

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/smi"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fakeGPUs gives a fake reader, a fixed clock and an empty runs directory
// as the machine's stand-ins, and returns the directory.
func fakeGPUs(t *testing.T, f *smi.Fake) (Hooks, string) {
	t.Helper()
	dir := t.TempDir()
	return Hooks{
		OpenSMI: func() (smi.Reader, error) { return f, nil },
		Now:     func() time.Time { return time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC) },
		Zone:    time.UTC,
		RunsDir: func() string { return dir },
		// 1234 is the job 'batchfit run' started; every other PID has ended
		ProcessExists: func(pid int) bool { return pid == 1234 },
	}, dir
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

	var stdout, stderr strings.Builder
	if err := Watch(Env{Stdout: &stdout, Stderr: &stderr, Hooks: h}, []string{"--count", "2", "--interval", "10ms"}); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	out := stdout.String()
	path := filepath.Join("testdata", "watch.golden")
	if *update {
		os.WriteFile(path, []byte(out), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("watch output differs from %s (go test -update after checking):\n--- %s\n%s--- output\n%s", path, path, want, out)
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
