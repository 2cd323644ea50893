package record

import (
	"bytes"
	"strings"
	"testing"
)

func TestReadWrite(t *testing.T) {
	n := int64(42)
	code := 3
	recs := []Record{
		{Kind: KindRun, Command: []string{"python", "train.py"}, Args: []string{"--model", "mlp"}},
		{Kind: KindStep, Seq: 1, Step: 1, Batch: &n, MaxAllocated: &n},
		{Kind: KindExit, Code: &code},
	}
	var b bytes.Buffer
	w := NewWriter(&b)
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !IsRecording(b.Bytes()) {
		t.Error("a recording is not recognised")
	}
	got, err := ReadAll(&b, "rec")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || *got[1].Batch != 42 || *got[2].Code != 3 || got[0].Args[1] != "mlp" {
		t.Errorf("read back %+v", got)
	}
}

func TestReadErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{\"kind\":\"run\"}\nnot json\n", "rec:2: not a batchfit recording line"},
		{"\n\n{\"seq\":1}\n", "rec:3: a record without \"kind\""},
		{"{\"kind\":\"step\",\"batch\":\"eight\"}", "rec:1:"},
		{`{"kind":"run"}` + "\n" + strings.Repeat("x", MaxLine+1), "rec:2: a line longer than"},
	} {
		_, err := ReadAll(strings.NewReader(c.in), "rec")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: error %v, want %q", c.in, err, c.want)
		}
	}
	if IsRecording([]byte(`{"kind":"step"}`)) || IsRecording([]byte(`{"results":[]}`)) {
		t.Error("a file that does not start with a run header is taken for a recording")
	}
}

// The summary's figures, worked out from the records by hand.
func TestSummarize(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	yes := true
	recs := []Record{
		{Kind: KindRun},
		{Kind: KindStart, Torch: "2.5.1", CUDA: &yes, Device: "NVIDIA H100 80GB HBM3", DeviceTotal: i(80 << 30), Capability: "9.0"},
		// the first step ran a larger batch (a batch-size search), the
		// third folded a skipped step's passes into its own
		{Kind: KindStep, Optimizer: 0, Step: 1, Batch: i(64), MicroBatches: 4, Time: 10, MaxAllocated: i(5 << 30), MaxReserved: i(6 << 30),
			Reserved: i(6 << 30), DeviceFree: i(73 << 30), DeviceTotal: i(80 << 30), NumAllocRetries: i(0)},
		{Kind: KindStep, Optimizer: 1, Step: 1, Time: 10.5, MaxAllocated: i(7 << 30), MaxReserved: i(8 << 30)},
		{Kind: KindStep, Optimizer: 0, Step: 2, Batch: i(16), MicroBatches: 4, Time: 11, MaxAllocated: i(7 << 30), MaxReserved: i(8 << 30), NumAllocRetries: i(2)},
		{Kind: KindStep, Optimizer: 0, Step: 3, Batch: i(16), MicroBatches: 8, Time: 13},
		{Kind: KindStep, Optimizer: 0, Step: 4, Batch: i(16), MicroBatches: 4, Time: 14},
		// a reading that skipped step 5: 3 s over two steps
		{Kind: KindStep, Optimizer: 0, Step: 6, Batch: i(16), MicroBatches: 4, Time: 17},
		{Kind: KindWarning, Message: "recorder: something"},
		{Kind: KindExit, Code: new(int)},
	}
	s := Summarize(recs)
	if !s.Started || !s.CUDA || s.Steps != 6 || s.Optimizers != 2 || *s.Batch != 16 || s.MicroBatches != 4 {
		t.Errorf("summary %+v", s)
	}
	if *s.PeakAllocated != 7<<30 || *s.PeakReserved != 8<<30 || s.Retries != 2 {
		t.Errorf("peaks %d %d retries %d", *s.PeakAllocated, *s.PeakReserved, s.Retries)
	}
	// outside PyTorch: 80 − 73 − 6 GiB at the first step
	if s.Outside == nil || *s.Outside != 1<<30 {
		t.Errorf("outside %v", s.Outside)
	}
	// optimizer 0 stepped at 10, 11, 13, 14 and (step 6) 17: the
	// intervals per step after the first are 2, 1, 1.5, whose median is 1.5
	if s.StepSeconds != 1.5 {
		t.Errorf("step time %g, want 1.5", s.StepSeconds)
	}
	if len(s.Warnings) != 1 || s.Exit == nil {
		t.Errorf("warnings %v, exit %v", s.Warnings, s.Exit)
	}
}

func TestRecorderEnv(t *testing.T) {
	env := recorderEnv([]string{"PATH=/bin", "PYTHONPATH=/mine", "BATCHFIT_RECORD_FD=9"}, "/rec", "/tmp/s.pickle")
	got := strings.Join(env, " ")
	if got != "PATH=/bin PYTHONPATH=/rec:/mine BATCHFIT_RECORD_FD=3 BATCHFIT_SNAPSHOT=/tmp/s.pickle" {
		t.Errorf("environment %q", got)
	}
	if got := strings.Join(recorderEnv([]string{"PYTHONPATH="}, "/rec", ""), " "); got != "PYTHONPATH=/rec BATCHFIT_RECORD_FD=3" {
		t.Errorf("environment %q", got)
	}
}

// FuzzReader: any bytes give records or an error naming the line, never a
// panic.
func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"kind":"run","args":["--model","mlp"]}` + "\n" + `{"kind":"step","max_allocated":12}`))
	f.Add([]byte("{\"kind\":1}\n\n{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ReadAll(bytes.NewReader(b), "fuzz")
		if err == nil {
			Summarize(recs)
		} else if !strings.HasPrefix(err.Error(), "fuzz") {
			t.Fatalf("error without the input's name: %v", err)
		}
	})
}
