package validation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/trace"
)

// The GPU corpus (testdata/gpu) holds real GPU measurements made by other
// people with PyTorch on NVIDIA GPUs, one JSON file per case under cases/,
// the stripped allocator recordings of the allocation-level cases under
// recordings/ and the model configurations the cases need under models/.
// testdata/gpu/README.md gives each source's provenance.

// GPUCase is one case file of the corpus.
type GPUCase struct {
	ID     string `json:"id"`
	Family string `json:"family"`
	// Kind is snapshot, trace (allocation-level recordings), log or table.
	Kind   string    `json:"kind"`
	Source GPUSource `json:"source"`
	// Args is the 'batchfit estimate' command line (without the word
	// estimate) that reproduces the run. Arguments that start with
	// "models/" name files of the corpus and are read relative to its
	// directory.
	Args     []string    `json:"args"`
	Env      GPUEnv      `json:"env"`
	Measured GPUMeasured `json:"measured"`
	// Resolution is the rounding of the source's figures in bytes (1 for
	// exact figures).
	Resolution int64 `json:"resolution"`
	// SetupKnown says every setting that changes memory is stated by the
	// source.
	SetupKnown bool     `json:"setup_known"`
	Unstated   []string `json:"unstated"`
	// Recording is the stripped recording, relative to the corpus
	// directory (allocation-level cases only).
	Recording string `json:"recording,omitempty"`
	// KnownCause names a cause, printed by 'batchfit estimate' for this
	// case's command line, that explains an under-prediction (see
	// KnownCauses and docs/accuracy.md).
	KnownCause string `json:"known_cause,omitempty"`
	Notes      string `json:"notes,omitempty"`

	// File is the case file's path, and Dir the corpus directory.
	File string `json:"-"`
	Dir  string `json:"-"`
	// Window is what the recording of an allocation-level case shows
	// (nil for other kinds).
	Window *RecordedWindow `json:"-"`
}

// GPUSource is where a case's figures come from.
type GPUSource struct {
	Repo    string `json:"repo"`
	Commit  string `json:"commit"`
	Path    string `json:"path"`
	Licence string `json:"licence"`
	URL     string `json:"url,omitempty"`
	Quote   string `json:"quote,omitempty"`
}

// GPUEnv is the software and hardware of the run, as stated ("" where the
// source does not say).
type GPUEnv struct {
	GPU    string `json:"gpu"`
	Torch  string `json:"torch"`
	CUDA   string `json:"cuda"`
	CuDNN  string `json:"cudnn"`
	Driver string `json:"driver"`
}

// GPUMeasured are the measured figures, in bytes; zero where the source
// does not give one.
type GPUMeasured struct {
	MaxMemoryAllocated int64 `json:"max_memory_allocated,omitempty"`
	MaxMemoryReserved  int64 `json:"max_memory_reserved,omitempty"`
	DeviceUsed         int64 `json:"device_used,omitempty"`
	OOM                bool  `json:"oom,omitempty"`
	LargestBatch       int64 `json:"largest_batch,omitempty"`
	FirstOOMBatch      int64 `json:"first_oom_batch,omitempty"`
	// SearchStepBelow is the batch the source's own search would have
	// tried next had LargestBatch failed: one step of that search below
	// the largest batch that ran (timm's decay_batch_step, or half for a
	// search by doubling). An answer at or above it is within one step.
	SearchStepBelow int64 `json:"search_step_below,omitempty"`
}

// KnownCauses are the causes a case may name in known_cause: each is the
// id of a note that 'batchfit estimate' prints with the prediction, and
// Print is text that the note contains (the accuracy test checks it is
// printed for the case's command line). docs/accuracy.md, section 11,
// documents each.
//
// NeverFails marks a cause whose missing bytes cannot make a step run out
// of memory: a cuDNN workspace (or an algorithm search's) is allocated in
// a try block, and where the allocator cannot supply it even after
// freeing its cache, PyTorch catches the error and takes another
// algorithm (aten/src/ATen/native/cudnn/Conv_v8.cpp try_configs and the
// benchmark's cacheInfo-bounded search). Such a case's error says nothing
// of whether a batch fits, so the bands leave it out.
var KnownCauses = map[string]struct {
	Print      string
	NeverFails bool
}{
	// The CS336 models' own AdamW is predicted as torch.optim's
	// (models/cs336.go).
	models.CS336NoteID: {Print: "note [" + models.CS336NoteID + "]"},
	// LitGPT's 4-bit rows exceed the rules read from Fabric's and
	// bitsandbytes' source (graph.FabricExcessNote).
	graph.FabricExcessNoteID: {Print: "note [" + graph.FabricExcessNoteID + "]"},
	// cuDNN 9's backward-filter engines add split-K buffers no shape rule
	// gives (predict's cudnn-workspace note, docs/accuracy.md §3.1).
	"cudnn-workspace": {Print: "backward-filter kernels add a split-K buffer", NeverFails: true},
	// cudnn.benchmark's search tries candidates up to the largest free
	// block (predict's cudnn-benchmark note).
	"cudnn-benchmark": {Print: "a search may use up to the largest free block", NeverFails: true},
}

// RecordedWindow is what an allocation-level recording shows: PyTorch's
// allocated and reserved bytes over the recorded window.
type RecordedWindow struct {
	// Events is the number of recorded alloc and free events.
	Events int
	// StartAllocated and StartReserved are the bytes allocated and
	// reserved when recording began (zero when it began on an empty
	// allocator); PeakAllocated and PeakReserved the most over the window.
	StartAllocated, PeakAllocated int64
	StartReserved, PeakReserved   int64
	// PreExisting counts the blocks allocated before the window.
	PreExisting int
	// SegmentAllocs counts the segments cudaMalloc'd in the window.
	SegmentAllocs int
}

var (
	caseIDPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	repoPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	caseKinds     = []string{"snapshot", "trace", "log", "table"}
)

// maxCaseFile bounds a case file: cases are a few hundred bytes.
const maxCaseFile = 1 << 20

// LoadGPUCorpus reads every case file in dir/cases, in the order of their
// names, checks each (errors name the file and the field), and reads the
// recording of each allocation-level case to fill Window and, where the
// case leaves them out, the measured peaks.
func LoadGPUCorpus(dir string) ([]GPUCase, error) {
	files, err := filepath.Glob(filepath.Join(dir, "cases", "*.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the GPU corpus %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("reading the GPU corpus %s: no cases/*.json", dir)
	}
	sort.Strings(files)
	var cases []GPUCase
	ids := make(map[string]string)
	for _, f := range files {
		c, err := loadGPUCase(dir, f)
		if err != nil {
			return nil, err
		}
		if prev, ok := ids[c.ID]; ok {
			return nil, fmt.Errorf("%s: id %q is also the id of %s", f, c.ID, prev)
		}
		ids[c.ID] = f
		cases = append(cases, *c)
	}
	return cases, nil
}

func loadGPUCase(dir, file string) (*GPUCase, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading case: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCaseFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading case %s: %w", file, err)
	}
	if len(data) > maxCaseFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, maxCaseFile)
	}
	c, err := parseGPUCase(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	c.File, c.Dir = file, dir
	if want := strings.TrimSuffix(filepath.Base(file), ".json"); c.ID != want {
		return nil, fmt.Errorf("%s: field \"id\": %q, expected the file's name %q", file, c.ID, want)
	}
	if c.Recording != "" {
		if err := c.readRecording(); err != nil {
			return nil, fmt.Errorf("%s: field \"recording\": %w", file, err)
		}
	}
	return c, nil
}

// parseGPUCase decodes and checks one case file's content.
func parseGPUCase(data []byte) (*GPUCase, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c GPUCase
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("field %q: a JSON %s, expected %s", te.Field, te.Value, te.Type)
		}
		return nil, fmt.Errorf("not a case: %w", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	fail := func(field, format string, args ...any) error {
		return fmt.Errorf("field %q: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case !caseIDPattern.MatchString(c.ID):
		return nil, fail("id", "%q, expected lower-case letters, digits and single dashes", c.ID)
	case strings.TrimSpace(c.Family) == "":
		return nil, fail("family", "missing")
	case !contains(caseKinds, c.Kind):
		return nil, fail("kind", "%q, expected one of %s", c.Kind, strings.Join(caseKinds, ", "))
	case !repoPattern.MatchString(c.Source.Repo):
		return nil, fail("source.repo", "%q, expected owner/name", c.Source.Repo)
	case !commitPattern.MatchString(c.Source.Commit):
		return nil, fail("source.commit", "%q, expected 40 lower-case hex digits", c.Source.Commit)
	case c.Source.Path == "":
		return nil, fail("source.path", "missing")
	case c.Source.Licence == "":
		return nil, fail("source.licence", "missing (write \"unstated\" when the source states none)")
	case len(c.Args) == 0:
		return nil, fail("args", "missing: the estimate command line that reproduces the run")
	case c.Resolution < 1:
		return nil, fail("resolution", "%d, expected the figures' rounding in bytes (1 for exact)", c.Resolution)
	}
	m := c.Measured
	for _, v := range []struct {
		name string
		n    int64
	}{{"max_memory_allocated", m.MaxMemoryAllocated}, {"max_memory_reserved", m.MaxMemoryReserved},
		{"device_used", m.DeviceUsed}, {"largest_batch", m.LargestBatch}, {"first_oom_batch", m.FirstOOMBatch}, {"search_step_below", m.SearchStepBelow}} {
		if v.n < 0 {
			return nil, fail("measured."+v.name, "%d, expected a non-negative number", v.n)
		}
	}
	if m.MaxMemoryAllocated > 0 && m.MaxMemoryReserved > 0 && m.MaxMemoryAllocated > m.MaxMemoryReserved {
		return nil, fail("measured.max_memory_allocated", "%d is more than max_memory_reserved %d", m.MaxMemoryAllocated, m.MaxMemoryReserved)
	}
	if m.SearchStepBelow > 0 && (m.LargestBatch == 0 || m.SearchStepBelow >= m.LargestBatch) {
		return nil, fail("measured.search_step_below", "%d, expected less than largest_batch %d", m.SearchStepBelow, m.LargestBatch)
	}
	if m.LargestBatch > 0 && m.FirstOOMBatch > 0 && m.FirstOOMBatch <= m.LargestBatch {
		return nil, fail("measured.first_oom_batch", "%d, expected more than largest_batch %d", m.FirstOOMBatch, m.LargestBatch)
	}
	allocLevel := c.Kind == "snapshot" || c.Kind == "trace"
	switch {
	case allocLevel && c.Recording == "":
		return nil, fail("recording", "missing: a %s case needs its recording", c.Kind)
	case !allocLevel && c.Recording != "":
		return nil, fail("recording", "only snapshot and trace cases have one, this is a %s case", c.Kind)
	case c.Recording != "" && (!strings.HasPrefix(c.Recording, "recordings/") || strings.Contains(c.Recording, "..") || filepath.IsAbs(c.Recording)):
		return nil, fail("recording", "%q, expected a file under recordings/", c.Recording)
	case !allocLevel && m == (GPUMeasured{}):
		return nil, fail("measured", "no figure: give at least one")
	}
	if c.KnownCause != "" {
		if _, ok := KnownCauses[c.KnownCause]; !ok {
			return nil, fail("known_cause", "%q is not a known cause (%s)", c.KnownCause, knownCauseNames())
		}
	}
	return &c, nil
}

func knownCauseNames() string {
	if len(KnownCauses) == 0 {
		return "none are defined"
	}
	var names []string
	for k := range KnownCauses {
		names = append(names, k)
	}
	sort.Strings(names)
	return "known: " + strings.Join(names, ", ")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// readRecording reads an allocation-level case's recording into Window,
// and sets the measured peaks the case file leaves out; figures the case
// file gives must be the recording's.
func (c *GPUCase) readRecording() error {
	if c.Kind != "snapshot" {
		return fmt.Errorf("reading %s recordings is not supported yet", c.Kind)
	}
	s, err := snapshot.ReadFile(filepath.Join(c.Dir, c.Recording), snapshot.Options{})
	if err != nil {
		return err
	}
	w, err := MeasureSnapshot(s, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Recording, err)
	}
	c.Window = w
	for _, v := range []struct {
		name string
		dst  *int64
		got  int64
	}{{"max_memory_allocated", &c.Measured.MaxMemoryAllocated, w.PeakAllocated},
		{"max_memory_reserved", &c.Measured.MaxMemoryReserved, w.PeakReserved}} {
		switch {
		case *v.dst == 0:
			*v.dst = v.got
		case *v.dst != v.got:
			return fmt.Errorf("measured.%s is %d, the recording gives %d", v.name, *v.dst, v.got)
		}
	}
	return nil
}

// MeasureSnapshot reads the peaks of a recording: the most bytes
// allocated and reserved on device at any point of its recorded window,
// the state before the window included.
//
// Allocated bytes are what torch.cuda.max_memory_allocated counts: block
// sizes, each request rounded up to a multiple of 512 bytes as round_size
// does in c10/cuda/CUDACachingAllocator.cpp (a snapshot records requested
// sizes). A block that took a whole free block because the rest was too
// small to split is larger than that, by less than 1 MiB; such blocks
// cannot be told apart in the trace, so the figure can be that much low.
// Blocks allocated before the window are counted from it: those the
// window frees, and those the snapshot shows allocated at its end (see
// snapshot.Convert). Reserved bytes are exact: the segments at the end,
// with the window's segment events undone back to its start.
func MeasureSnapshot(s *snapshot.Snapshot, device int) (*RecordedWindow, error) {
	if s.HasAllocatorSettings {
		for mib, div := range s.AllocatorSettings.RoundupPower2Divisions {
			if div > 1 {
				return nil, fmt.Errorf("roundup_power2_divisions %d for %d MiB: that rounding is not measured", div, mib)
			}
		}
	}
	conv, err := s.Convert(device)
	if err != nil {
		return nil, err
	}
	w := &RecordedWindow{PreExisting: conv.PreExisting}
	sizes := make(map[int64]int64)
	var cur int64
	for i, e := range conv.Trace.Events {
		switch e.Action {
		case trace.Alloc:
			// round_size with the default configuration: a multiple of
			// kMinBlockSize (CUDACachingAllocator.cpp).
			n := max(alloc.MinBlockSize, (e.Size+alloc.MinBlockSize-1)/alloc.MinBlockSize*alloc.MinBlockSize)
			sizes[e.ID] = n
			cur += n
			if i < conv.PreExisting {
				w.StartAllocated = cur
			} else {
				w.Events++
			}
		case trace.Free:
			cur -= sizes[e.ID]
			delete(sizes, e.ID)
			w.Events++
		}
		w.PeakAllocated = max(w.PeakAllocated, cur)
	}
	var end int64
	for i := range s.Segments {
		if s.Segments[i].Device == device {
			end += s.Segments[i].TotalSize
		}
	}
	start := end
	for _, g := range conv.Segments {
		switch g.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			start -= g.Size
			if g.Action == snapshot.ActionSegmentAlloc {
				w.SegmentAllocs++
			}
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			start += g.Size
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("its segment events allocate %d bytes more than the segments it ends with", -start)
	}
	w.StartReserved, w.PeakReserved = start, start
	r := start
	for _, g := range conv.Segments {
		switch g.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			r += g.Size
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			r -= g.Size
		}
		w.PeakReserved = max(w.PeakReserved, r)
	}
	if w.PeakAllocated > w.PeakReserved {
		// The window's rounding cannot exceed what was reserved; when it
		// does, blocks before the window were counted twice.
		return nil, fmt.Errorf("allocated peak %d is above the reserved peak %d", w.PeakAllocated, w.PeakReserved)
	}
	return w, nil
}

// GPUComparison is batchfit's prediction for a case beside the case's
// measured figures. Errors are (predicted − measured) / measured, NaN
// where the case has no such figure.
type GPUComparison struct {
	Case GPUCase
	// Model is the model's name as batchfit prints it, Params its
	// parameter count.
	Model  string
	Params int64
	// Predicted figures: peak allocated, peak reserved, and the device
	// total (peak reserved plus the CUDA context, what nvidia-smi shows).
	PredAllocated, PredReserved, PredDevice int64
	ErrAllocated, ErrReserved, ErrDevice    float64
	// Reliance is what the prediction relies on (predict.Reliance): the
	// bands per reliance are made of these comparisons.
	Reliance predict.Reliance
}

// EstimateRequest turns the arguments of 'batchfit estimate' (without the
// word estimate) into the prediction request the command would run, read
// by package job as the command reads them: a case is predicted by the
// very code that reads the flags of 'batchfit estimate'. Only the first
// batch size of a --batch list is kept. No environment variable is read:
// a case's allocator settings are its command line's.
func EstimateRequest(args []string) (predict.Request, error) {
	r, _, err := job.Parse("estimate", args, job.Options{Inference: true}, "timeline")
	return r, err
}

// CompareGPUCorpus predicts every case with batchfit, from its command
// line exactly as 'batchfit estimate' reads it (EstimateRequest), and sets
// the prediction beside the measured figures.
func CompareGPUCorpus(cases []GPUCase) ([]GPUComparison, error) {
	out := make([]GPUComparison, 0, len(cases))
	for _, c := range cases {
		r, err := EstimateRequest(c.ResolvedArgs())
		if err != nil {
			return nil, fmt.Errorf("%s: field \"args\": %w", c.File, err)
		}
		res, err := predict.Run(context.Background(), r)
		if err != nil {
			return nil, fmt.Errorf("%s: predicting: %w", c.File, err)
		}
		rel, err := r.Reliances()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.File, err)
		}
		cmp := GPUComparison{
			Case: c, Model: res.Model, Params: res.Summary.ParamCount,
			PredAllocated: res.Timeline.PeakAllocated, PredReserved: res.Timeline.PeakReserved,
			PredDevice: res.DeviceTotal, Reliance: rel,
		}
		cmp.ErrAllocated = relErr(cmp.PredAllocated, c.Measured.MaxMemoryAllocated)
		cmp.ErrReserved = relErr(cmp.PredReserved, c.Measured.MaxMemoryReserved)
		cmp.ErrDevice = relErr(cmp.PredDevice, c.Measured.DeviceUsed)
		out = append(out, cmp)
	}
	return out, nil
}

// ResolvedArgs are the case's arguments with the corpus's model files
// ("models/...") made paths relative to the working directory.
func (c GPUCase) ResolvedArgs() []string {
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		if strings.HasPrefix(a, "models/") {
			a = filepath.Join(c.Dir, filepath.FromSlash(a))
		}
		args[i] = a
	}
	return args
}

// FailedBatch is the batch a case shows to have run out of memory: the
// first that failed in a largest-batch search, or the batch of a run that
// ran out of memory; 0 when the case shows none.
func (c GPUCase) FailedBatch() int64 {
	if c.Measured.FirstOOMBatch > 0 {
		return c.Measured.FirstOOMBatch
	}
	if c.Measured.OOM {
		for i, a := range c.Args {
			if (a == "--batch" || a == "-batch") && i+1 < len(c.Args) {
				if b, err := strconv.ParseInt(c.Args[i+1], 10, 64); err == nil {
					return b
				}
			}
		}
	}
	return 0
}

// FailureBound is what a batch that ran out of memory says of batchfit's
// error. The real job needed more than the GPU's capacity C at that
// batch; batchfit, by its own rules, fits it on less, down to C − m for
// the largest margin m at which the prediction still fits (the allocator
// frees its cache and retries on a smaller device, so this is less than
// the device total predicted on the whole GPU). The prediction therefore
// fell short by more than m/C of the real need, and a band must allow at
// least that for an answer held to it to stay below the failed batch.
// FailureBound returns −m/C and true, or false where the case has no
// failed batch or batchfit predicts the failure too; m is found to within
// a two-thousandth of C. The request is the case's command line at the
// failed batch; rel is what the prediction relies on.
func FailureBound(c GPUCase) (bound float64, rel predict.Reliance, ok bool, err error) {
	f := c.FailedBatch()
	if f == 0 {
		return 0, 0, false, nil
	}
	args := c.ResolvedArgs()
	for i := range args {
		if (args[i] == "--batch" || args[i] == "-batch") && i+1 < len(args) {
			args[i+1] = strconv.FormatInt(f, 10)
		}
	}
	r, err := EstimateRequest(args)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s: field \"args\": %w", c.File, err)
	}
	fits := func(m int64) (bool, predict.Reliance, error) {
		rm := r
		rm.Margin = m
		res, err := predict.Run(context.Background(), rm)
		if err != nil {
			return false, 0, fmt.Errorf("%s: predicting batch %d: %w", c.File, f, err)
		}
		return res.Fits, res.Relies, nil
	}
	ok, rel, err = fits(0)
	if err != nil || !ok {
		return 0, rel, false, err
	}
	capacity := r.GPU.Capacity
	lo, hi := int64(0), capacity // fits at lo; hi is beyond any margin
	for hi-lo > capacity/2000 {
		mid := lo + (hi-lo)/2
		var yes bool
		if yes, _, err = fits(mid); err != nil {
			// a margin that leaves nothing of the device beside the
			// context is an error: nothing fits there
			yes, err = false, nil
		}
		if yes {
			lo = mid
		} else {
			hi = mid
		}
	}
	return -float64(lo) / float64(capacity), rel, true, nil
}
