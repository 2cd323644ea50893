package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Kinds of records.
const (
	// KindRun is the first line of a recording batchfit writes: what ran
	// and what batchfit was told about it.
	KindRun = "run"
	// KindStart is the recorder's first report, once the script imports
	// torch.
	KindStart = "start"
	// KindDevice names the GPU once CUDA is up (the recorder never starts
	// CUDA itself).
	KindDevice = "device"
	// KindStep follows every optimizer step.
	KindStep = "step"
	// KindOOM is an out-of-memory error that ended the program.
	KindOOM = "oom"
	// KindWarning is a failure of the recorder itself (it never stops the
	// script).
	KindWarning = "warning"
	// KindExit is the child's exit, written by batchfit.
	KindExit = "exit"
)

// Record is one line of a recording. Memory figures are pointers: a run
// on the CPU has none of CUDA's, and a missing figure is not a zero.
type Record struct {
	Kind string `json:"kind"`

	// run
	Command []string `json:"command,omitempty"`
	// Args are the batchfit flags run was given before "--".
	Args []string `json:"args,omitempty"`
	// Job is the job the run describes (the model and its setup), for
	// predicting it beside the measurement: the job description's fields
	// the command line set, by their names in its field table (package
	// job), as text. validate reads it back through that table.
	Job     map[string]string `json:"job,omitempty"`
	Started string            `json:"started,omitempty"`

	// start
	PID              int    `json:"pid,omitempty"`
	Torch            string `json:"torch,omitempty"`
	Python           string `json:"python,omitempty"`
	CUDA             *bool  `json:"cuda,omitempty"`
	Device           string `json:"device,omitempty"`
	Capability       string `json:"capability,omitempty"`
	RecordingHistory bool   `json:"recording_history,omitempty"`

	// step
	Seq            int    `json:"seq,omitempty"`
	Optimizer      int    `json:"optimizer,omitempty"`
	OptimizerClass string `json:"optimizer_class,omitempty"`
	Step           int    `json:"step,omitempty"`
	MicroBatches   int    `json:"micro_batches,omitempty"`
	// OptimizerSettings are the first parameter group's momentum,
	// weight_decay, foreach, fused and amsgrad, on an optimizer's first
	// step (null: PyTorch's default).
	OptimizerSettings map[string]any `json:"optimizer_settings,omitempty"`
	Batch             *int64         `json:"batch,omitempty"`
	Time              float64        `json:"time,omitempty"`

	// memory (step, oom)
	Allocated       *int64 `json:"allocated,omitempty"`
	MaxAllocated    *int64 `json:"max_allocated,omitempty"`
	Reserved        *int64 `json:"reserved,omitempty"`
	MaxReserved     *int64 `json:"max_reserved,omitempty"`
	NumAllocRetries *int64 `json:"num_alloc_retries,omitempty"`
	NumOOMs         *int64 `json:"num_ooms,omitempty"`
	DeviceFree      *int64 `json:"device_free,omitempty"`
	DeviceTotal     *int64 `json:"device_total,omitempty"`
	RSS             *int64 `json:"rss,omitempty"`

	// oom, warning
	Message       string `json:"message,omitempty"`
	Snapshot      string `json:"snapshot,omitempty"`
	SnapshotError string `json:"snapshot_error,omitempty"`

	// exit
	Code   *int   `json:"code,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// MaxLine bounds one line of a recording: a step is a few hundred bytes,
// an out-of-memory message a few kilobytes.
const MaxLine = 1 << 20

// MaxRecords bounds how many lines ReadFile keeps (a run of a million
// optimizer steps is a few hundred megabytes of JSON).
const MaxRecords = 4 << 20

// Reader reads a recording line by line.
type Reader struct {
	s    *bufio.Scanner
	name string
	line int
}

// NewReader reads the recording in r; name stands for it in errors.
func NewReader(r io.Reader, name string) *Reader {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return &Reader{s: s, name: name}
}

// Next returns the next record, io.EOF at the end, or an error naming the
// line: a line that is not a JSON object, has no kind, or is longer than
// MaxLine. Blank lines are skipped.
func (r *Reader) Next() (*Record, error) {
	for r.s.Scan() {
		r.line++
		b := bytes.TrimSpace(r.s.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: not a batchfit recording line: %v", r.name, r.line, err)
		}
		if rec.Kind == "" {
			return nil, fmt.Errorf("%s:%d: a record without \"kind\"", r.name, r.line)
		}
		return &rec, nil
	}
	if err := r.s.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: a line longer than %d bytes", r.name, r.line+1, MaxLine)
		}
		return nil, fmt.Errorf("reading %s: %w", r.name, err)
	}
	return nil, io.EOF
}

// ReadAll reads every record of r.
func ReadAll(r io.Reader, name string) ([]Record, error) {
	rd := NewReader(r, name)
	var out []Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(out) == MaxRecords {
			return nil, fmt.Errorf("%s: more than %d records", name, MaxRecords)
		}
		out = append(out, *rec)
	}
}

// ReadFile reads the recording at path. The first record must be the run
// header batchfit writes.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := ReadAll(f, path)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || recs[0].Kind != KindRun {
		return nil, fmt.Errorf("%s: not a batchfit run recording (the first line must be {\"kind\":\"run\",...})", path)
	}
	return recs, nil
}

// IsRecording reports whether data starts like a recording: a JSON object
// of kind "run" on its first line.
func IsRecording(data []byte) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	var rec struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(bytes.TrimSpace(line), &rec) == nil && rec.Kind == KindRun
}

// Writer writes a recording.
type Writer struct {
	w   io.Writer
	err error
}

// NewWriter writes records to w, one JSON object a line.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one record; the first error sticks.
func (w *Writer) Write(r *Record) error {
	if w.err != nil {
		return w.err
	}
	b, err := json.Marshal(r)
	if err != nil {
		w.err = err
		return err
	}
	_, w.err = w.w.Write(append(b, '\n'))
	return w.err
}
