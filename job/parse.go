package job

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/suggest"
)

// UsageError marks bad input (a flag, a field, a value): the command line
// exits with status 2 for it, the server answers 400.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// Usagef is a UsageError of the formatted message.
func Usagef(format string, args ...any) error { return UsageError{fmt.Errorf(format, args...)} }

// IsUsage reports whether err is a usage error: a bad flag or field, or a
// setup that cannot apply to the model or the GPU (predict.SetupError).
func IsUsage(err error) bool {
	var u UsageError
	// Values beyond batchfit's bounds, adapters that name no module of
	// the model and planner options that contradict each other are found
	// only past the flags, but what the user gave is what is wrong.
	return errors.As(err, &u) || predict.IsSetupError(err) || errors.Is(err, graph.ErrBound) ||
		errors.As(err, new(graph.ModuleNameError)) || plan.IsInputError(err)
}

// ParseArgs parses flags that may come before or after the positional
// arguments, as people type them ("estimate resnet50 --batch 64"). -h
// prints the command's help; a bad flag is a one-line error that names
// the nearest flag and points to -h, not the whole help. Numeric flags
// are checked against their bounds (CheckBounds).
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseQuiet(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, CheckBounds(fs)
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseQuiet runs fs.Parse with the flag package's own printing (the
// error, then the whole help) held back: the help is printed only when it
// was asked for.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var held bytes.Buffer
	fs.SetOutput(&held)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		out.Write(held.Bytes())
		return UsageError{err}
	}
	return UsageError{FlagError{Cmd: fs.Name(), Err: err, Near: nearFlags(fs, err)}}
}

// FlagError is the flag package's complaint about a flag, with the
// nearest flags when the name is unknown.
type FlagError struct {
	Cmd  string
	Err  error
	Near []string
}

func (f FlagError) Error() string {
	msg := f.Err.Error()
	if name, ok := UndefinedFlag(f.Err); ok {
		msg = "unknown flag --" + strings.TrimLeft(name, "-")
	}
	if len(f.Near) > 0 {
		msg += "; did you mean --" + strings.Join(f.Near, " or --") + "?"
	}
	return msg + fmt.Sprintf(" (see 'batchfit %s -h')", f.Cmd)
}

func (f FlagError) Unwrap() error { return f.Err }

// UndefinedFlag is the name in the flag package's "flag provided but not
// defined: -NAME".
func UndefinedFlag(err error) (string, bool) {
	var fe FlagError
	if errors.As(err, &fe) {
		err = fe.Err
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	return name, ok && name != "" && !strings.ContainsAny(name, " \n")
}

func nearFlags(fs *flag.FlagSet, err error) []string {
	name, ok := UndefinedFlag(err)
	if !ok {
		return nil
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Nearest(strings.TrimLeft(name, "-"), names, 2)
}

// spellings are the names other tools give a field, which a typo of ours
// would not reach by its letters: Hugging Face's batch_size, the bs of
// every training script.
var spellings = map[string]string{
	"bs": "batch", "batch-size": "batch", "micro-batch": "batch", "per-device-train-batch-size": "batch",
	"seq-len": "seq", "seqlen": "seq", "max-seq-len": "seq", "sequence-length": "seq", "max-length": "seq",
	"dtype": "precision", "grad-accum": "accumulate", "gradient-accumulation-steps": "accumulate",
	"gradient-checkpointing": "checkpointing", "optim": "optimizer", "wd": "weight-decay",
}

// Nearest are up to n of names nearest to the unknown name s: the name
// the spelling of another tool stands for, the names s begins (an
// abbreviation: --bat for --batch), then those within a small edit
// distance.
func Nearest(s string, names []string, n int) []string {
	k := strings.ReplaceAll(strings.ToLower(s), "_", "-")
	var out []string
	if to, ok := spellings[k]; ok && slices.Contains(names, to) {
		out = append(out, to)
	}
	if len(k) >= 2 {
		for _, c := range names {
			if strings.HasPrefix(c, k) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	for _, c := range suggest.Nearest(k, names, n) {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// MaxBatchSizes bounds the batch sizes one --batch gives: a sweep of more
// is refused in one line rather than cut short without a word.
const MaxBatchSizes = 4096

// ParseBatches reads "64", "64,8,32,4" or a range "1:64" (powers of two)
// or "8:64:8" (a step).
func ParseBatches(s string) ([]int64, error) {
	if s == "" {
		return nil, Usagef("--batch is required")
	}
	if strings.Contains(s, ":") {
		parts := strings.Split(s, ":")
		if len(parts) > 3 {
			return nil, Usagef("--batch %q: want FROM:TO or FROM:TO:STEP", s)
		}
		var v [3]int64
		for i, p := range parts {
			n, err := positiveInt(p)
			if err != nil {
				return nil, Usagef("--batch %q: %q %v", s, p, err)
			}
			v[i] = n
		}
		from, to := v[0], v[1]
		if to < from {
			return nil, Usagef("--batch %q: the range ends before it starts", s)
		}
		// how many sizes, counted before any is made (to-from cannot
		// overflow: both are positive)
		n := int64(1)
		if len(parts) == 3 {
			n = (to-from)/v[2] + 1
		} else {
			for b := from; b <= to/2; b *= 2 {
				n++
			}
		}
		if n > MaxBatchSizes {
			return nil, Usagef("--batch %q gives %s batch sizes, more than %s: take a larger step, or FROM:TO (doubling)", s, commas(n), commas(MaxBatchSizes))
		}
		out := make([]int64, 0, n)
		for b, ok := from, true; ok && b <= to && int64(len(out)) < n; {
			out = append(out, b)
			// a step past int64's largest ends the range, not wraps it
			if len(parts) == 3 {
				b, ok = graph.AddSize(b, v[2])
			} else {
				b, ok = graph.MulSize(b, 2)
			}
		}
		return out, nil
	}
	if n := strings.Count(s, ",") + 1; n > MaxBatchSizes {
		return nil, Usagef("--batch gives %s batch sizes, more than %s", commas(int64(n)), commas(MaxBatchSizes))
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		n, err := positiveInt(p)
		if err != nil {
			return nil, Usagef("batch size %q %v", strings.TrimSpace(p), err)
		}
		out = append(out, n)
	}
	return out, nil
}

// positiveInt reads a batch size: a positive integer in digits. A number
// that is whole but written otherwise (1e9, 64.0) is told how to write
// it, rather than called no integer.
func positiveInt(p string) (int64, error) {
	p = strings.TrimSpace(p)
	n, err := strconv.ParseInt(p, 10, 64)
	if err == nil && n > 0 {
		return n, nil
	}
	if err == nil {
		return 0, errors.New("is not a positive integer")
	}
	if x, ferr := strconv.ParseFloat(p, 64); ferr == nil && x >= 1 && x < 1<<63 && x == float64(int64(x)) {
		return 0, fmt.Errorf("must be an integer written in digits, e.g. %d", int64(x))
	}
	return 0, errors.New("is not a positive integer")
}

// commas writes n with thousands separated: 65,536.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Parse reads the arguments of a job command cmd (without the command's
// name): flags anywhere, exactly one model, and the batch sizes of
// --batch. It returns the prediction request for that model at the first
// batch size, and the batch sizes. ignore are string flags of the
// command's own that do not change the job (estimate's --timeline),
// accepted so that any of its command lines parses. Help and usage text
// are discarded: a caller that predicts for a command line (the
// validation cases) gets exactly what the command predicts, or its
// errors.
func Parse(cmd string, args []string, o Options, ignore ...string) (predict.Request, []int64, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j Job
	Register(fs, &j, cmd)
	for _, name := range ignore {
		fs.String(name, "", "")
	}
	pos, err := ParseArgs(fs, args)
	if err != nil {
		return predict.Request{}, nil, err
	}
	if j.Model != "" {
		pos = append([]string{j.Model}, pos...)
	}
	if len(pos) != 1 {
		return predict.Request{}, nil, Usagef("%s takes one model, got %d (see 'batchfit %s -h')", cmd, len(pos), cmd)
	}
	batches, err := ParseBatches(j.Batch)
	if err != nil {
		return predict.Request{}, nil, err
	}
	r, err := j.RequestFor(pos[0], o)
	if err != nil {
		return predict.Request{}, nil, err
	}
	r.Config.Batch = batches[0]
	return r, batches, nil
}
