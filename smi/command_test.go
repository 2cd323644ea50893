//go:build !(cgo && nvml)

package smi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nvidia-smi's rows for two H100s (81559 MiB is the total nvidia-smi
// shows for an H100 80GB HBM3), the second without utilisation figures,
// and its compute processes, one of them without a memory figure as in
// some containers.
const (
	gpuRows = "0, NVIDIA H100 80GB HBM3, GPU-aaaa, 81559, 40961, 40096, 97, 61\n" +
		"1, NVIDIA H100 80GB HBM3, GPU-bbbb, 81559, 4, 81072, [N/A], [Not Supported]\n"
	appRows = "GPU-aaaa, 4242, 40952\nGPU-aaaa, 4343, [N/A]\n"
)

func TestParse(t *testing.T) {
	gpus, err := parseGPUs([]byte(gpuRows))
	if err != nil {
		t.Fatal(err)
	}
	if err := addProcesses(gpus, []byte(appRows)); err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-aaaa", Total: 81559 * mib, Used: 40961 * mib, Free: 40096 * mib, Util: 97, MemUtil: 61,
			Processes: []Process{{PID: 4242, Used: 40952 * mib}, {PID: 4343, Used: -1}}},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-bbbb", Total: 81559 * mib, Used: 4 * mib, Free: 81072 * mib, Util: -1, MemUtil: -1},
	}
	if len(gpus) != len(want) {
		t.Fatalf("%d GPUs", len(gpus))
	}
	for i := range want {
		g, w := gpus[i], want[i]
		if g.Index != w.Index || g.Name != w.Name || g.UUID != w.UUID || g.Total != w.Total || g.Used != w.Used || g.Free != w.Free ||
			g.Util != w.Util || g.MemUtil != w.MemUtil || len(g.Processes) != len(w.Processes) {
			t.Errorf("GPU %d = %+v\nwant %+v", i, g, w)
			continue
		}
		for j := range w.Processes {
			if g.Processes[j] != w.Processes[j] {
				t.Errorf("GPU %d process %d = %+v, want %+v", i, j, g.Processes[j], w.Processes[j])
			}
		}
	}
	for _, bad := range []struct{ rows, want string }{
		{"0, H100, GPU-a, 81559\n", "4 fields, want 8"},
		{"x, H100, GPU-a, 1, 1, 1, 1, 1\n", "index"},
		{"0, H100, GPU-a, [N/A], 1, 1, 1, 1\n", "not a number of MiB"},
		{"0, \"H100, GPU-a, 1, 1, 1, 1, 1\n", "--query-gpu"},
	} {
		if _, err := parseGPUs([]byte(bad.rows)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.rows, err, bad.want)
		}
	}
	if err := addProcesses(gpus, []byte("GPU-aaaa, x, 1\n")); err == nil || !strings.Contains(err.Error(), "pid") {
		t.Errorf("a bad pid: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(gpuRows, appRows)
	f.Add("", "")
	f.Add("0, a, b, 1, 2, 3, 4, 5", "b, 1, 2")
	f.Fuzz(func(t *testing.T, g, a string) {
		gpus, err := parseGPUs([]byte(g))
		if err != nil {
			return
		}
		for _, x := range gpus {
			if x.Total < 0 || x.Used < 0 || x.Free < 0 || x.Util < -1 || x.Util > 100 {
				t.Fatalf("%q: %+v", g, x)
			}
		}
		addProcesses(gpus, []byte(a))
	})
}

// The reader runs nvidia-smi as found on PATH: a stand-in script here,
// answering the two queries; one that fails as nvidia-smi does without
// a driver makes Open say ErrNoDriver.
func TestCommandReader(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) printf '" + strings.ReplaceAll(gpuRows, "\n", "\\n") + "' ;;\n" +
		"--query-compute-apps=*) printf '" + strings.ReplaceAll(appRows, "\n", "\\n") + "' ;;\n*) exit 2 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	r, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := r.Read()
	if err != nil || len(gpus) != 2 || len(gpus[0].Processes) != 2 || gpus[0].Used != 40961*mib {
		t.Fatalf("%+v, %v", gpus, err)
	}
	r.Close()

	fail := "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(fail), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(); !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "couldn't communicate") {
		t.Errorf("no driver: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Open(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("no nvidia-smi: %v", err)
	}
}
