package validation

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
)

// ThroughputRow is one published single-GPU training throughput of the
// calibration set (testdata/throughput/throughput.csv): a figure someone
// else measured, where it was published, and the batchfit command line
// that describes the run.
type ThroughputRow struct {
	// ID names the row; Source the publication (a table of one release of
	// one benchmark); Path the repository@commit:file (and line) the
	// figure was read from.
	ID, Source, Path string
	// GPU is the catalog name of the GPU it ran on, System the machine
	// (a DGX model; the GPU's name in Lambda's tables, several joined where
	// their figures were merged).
	GPU, System string
	// Args is the 'batchfit estimate' command line (without the word
	// estimate) that reproduces the run: model, --gpu, --batch,
	// --precision, the optimizer, --image or --seq.
	Args []string
	// Throughput is the published figure in Unit: images/s or
	// sequences/s (samples per second either way), or tokens/s of one
	// GPU (a language model's trainer: samples per second times --seq).
	Throughput float64
	Unit       string
	// Data says whether the input was synthetic or real (a real pipeline
	// may bound the figure below what the GPU could do).
	Data string
	// Exact is false where batchfit's model differs from the one that ran
	// (BERT's SQuAD head is not the zoo's masked-LM head): such rows are
	// reported but not held to the thresholds.
	Exact bool
	// TF32Matmul is true where float32 matmuls ran in TF32 (NGC containers
	// on Ampere and later), which PyTorch's own default does not do.
	TF32Matmul bool
	// Software is the container or release the figure was measured with.
	Software string
	Notes    string
	// Line is the row's line in the file.
	Line int
	// Root is the directory a model named by a relative path (a captured
	// graph, testdata/capture/NAME.bfgraph.gz) is read from: the
	// repository's root, two levels above the set's file (LoadThroughput).
	Root string
}

// throughputHeader is the calibration set's header, in order.
var throughputHeader = []string{"id", "source", "path", "gpu", "system", "args", "throughput", "unit", "data", "exact", "tf32_matmul", "software", "notes"}

// maxThroughputBytes bounds the file read: the set is a few hundred rows.
const maxThroughputBytes = 8 << 20

// LoadThroughput reads and checks the calibration set at path.
func LoadThroughput(path string) ([]ThroughputRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	rows, err := ParseThroughput(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	root := filepath.Join(filepath.Dir(path), "..", "..")
	for i := range rows {
		rows[i].Root = root
		if p := rows[i].Path; ownScript(p) {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				return nil, fmt.Errorf("%s: line %d: field \"path\" names %s, which this repository lacks: %w", path, rows[i].Line, p, err)
			}
		}
	}
	return rows, nil
}

// ParseThroughput reads a calibration set in CSV (the header
// throughputHeader, one published figure a row) and checks every field.
func ParseThroughput(r io.Reader) ([]ThroughputRow, error) {
	lr := &io.LimitedReader{R: r, N: maxThroughputBytes + 1}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = len(throughputHeader)
	cr.ReuseRecord = false
	head, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("empty file: expected the header " + strings.Join(throughputHeader, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the header: %w", err)
	}
	for i, h := range throughputHeader {
		if head[i] != h {
			return nil, fmt.Errorf("line 1: column %d is %q, expected %q", i+1, head[i], h)
		}
	}
	var rows []ThroughputRow
	ids := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading: %w", err)
		}
		if lr.N <= 0 {
			return nil, fmt.Errorf("larger than %d bytes", maxThroughputBytes)
		}
		line, _ := cr.FieldPos(0)
		row, err := parseThroughputRow(rec, line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if prev, ok := ids[row.ID]; ok {
			return nil, fmt.Errorf("line %d: id %q repeats line %d", line, row.ID, prev)
		}
		ids[row.ID] = line
		rows = append(rows, row)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("larger than %d bytes", maxThroughputBytes)
	}
	if len(rows) == 0 {
		return nil, errors.New("no rows after the header")
	}
	return rows, nil
}

func parseThroughputRow(rec []string, line int) (ThroughputRow, error) {
	row := ThroughputRow{ID: rec[0], Source: rec[1], Path: rec[2], GPU: rec[3], System: rec[4], Unit: rec[7], Data: rec[8],
		Software: rec[11], Notes: rec[12], Line: line}
	for i, v := range []string{row.ID, row.Source, row.Path, row.GPU, row.System, row.Data} {
		if strings.TrimSpace(v) == "" {
			return row, fmt.Errorf("field %q is empty", throughputHeader[[]int{0, 1, 2, 3, 4, 8}[i]])
		}
	}
	// A published figure names the repository@commit:file it was read
	// from; a figure this project measured names the script in this
	// repository that measured it (validation/steptime_gpu.py), a local
	// path that LoadThroughput checks exists.
	if !(strings.Contains(row.Path, "@") && strings.Contains(row.Path, ":")) && !ownScript(row.Path) {
		return row, fmt.Errorf("field \"path\" is %q, expected repository@commit:file or a script of this repository", row.Path)
	}
	row.Args = strings.Fields(rec[5])
	if len(row.Args) == 0 {
		return row, errors.New("field \"args\" is empty, expected an estimate command line")
	}
	v, err := strconv.ParseFloat(rec[6], 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return row, fmt.Errorf("field \"throughput\" is %q, expected a positive number", rec[6])
	}
	row.Throughput = v
	switch row.Unit {
	case "images/s", "sequences/s":
	case "tokens/s":
		if _, err := row.Seq(); err != nil {
			return row, err
		}
	default:
		return row, fmt.Errorf("field \"unit\" is %q, expected images/s, sequences/s or tokens/s", row.Unit)
	}
	if row.Exact, err = strconv.ParseBool(rec[9]); err != nil {
		return row, fmt.Errorf("field \"exact\" is %q, expected true or false", rec[9])
	}
	if row.TF32Matmul, err = strconv.ParseBool(rec[10]); err != nil {
		return row, fmt.Errorf("field \"tf32_matmul\" is %q, expected true or false", rec[10])
	}
	if _, err := row.Batch(); err != nil {
		return row, err
	}
	return row, nil
}

// ownScript reports whether p names a script by a path inside this
// repository (no repository@commit, no way out of the root, a Python or
// shell file): the script that measured a row this project measured.
func ownScript(p string) bool {
	ext := filepath.Ext(p)
	return !strings.ContainsAny(p, "@:") && filepath.IsLocal(p) && filepath.ToSlash(filepath.Clean(p)) == p &&
		(ext == ".py" || ext == ".sh")
}

// flag is the value of a --name flag of the row's command line ("" when
// absent); both --name v and --name=v are read, as the flag package does.
func (r ThroughputRow) flag(name string) string {
	for i, a := range r.Args {
		a = strings.TrimPrefix(a, "-")
		a = strings.TrimPrefix(a, "-")
		if a == name && i+1 < len(r.Args) {
			return r.Args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// Seq is the command line's --seq, which a row in tokens/s needs.
func (r ThroughputRow) Seq() (int64, error) {
	s := r.flag("seq")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("field \"args\": --seq is %q, expected the sequence length a figure in tokens/s is divided by", s)
	}
	return n, nil
}

// SamplesPerSecond is the published figure in samples per second of one
// GPU: a figure in tokens/s divided by the sequence length, the others as
// published.
func (r ThroughputRow) SamplesPerSecond() float64 {
	if r.Unit == "tokens/s" {
		if n, err := r.Seq(); err == nil {
			return r.Throughput / float64(n)
		}
	}
	return r.Throughput
}

// Model is the command line's model (its first argument).
func (r ThroughputRow) Model() string { return r.Args[0] }

// Family is the kind of network a row's model is, for the per-family
// figures: the families differ in which kernels dominate (tensor-core
// convolutions, depthwise convolutions, attention and the memory-bound
// ops around it).
func (r ThroughputRow) Family() string {
	m := strings.ToLower(filepath.Base(r.Model()))
	for _, f := range []struct{ prefix, family string }{
		{"wide_resnet", "resnet"}, {"resnet", "resnet"}, {"vgg", "vgg"}, {"densenet", "densenet"},
		{"efficientnet", "depthwise"}, {"mobilenet", "depthwise"}, {"vit", "vit"}, {"swin", "swin"},
		{"convnext", "convnext"}, {"bert", "bert"}, {"nnunet", "unet"}, {"llama", "llama"}, {"gpt2", "gpt2"},
	} {
		if strings.HasPrefix(m, f.prefix) {
			return f.family
		}
	}
	return m
}

// Precision is the command line's --precision ("32-true" when absent, the
// flag's default).
func (r ThroughputRow) Precision() string {
	if p := r.flag("precision"); p != "" {
		return p
	}
	return "32-true"
}

// Batch is the command line's --batch.
func (r ThroughputRow) Batch() (int64, error) {
	s := r.flag("batch")
	b, err := strconv.ParseInt(s, 10, 64)
	if err != nil || b <= 0 {
		return 0, fmt.Errorf("field \"args\": --batch is %q, expected one positive batch size", s)
	}
	return b, nil
}

// Workload names what a row ran apart from its batch size: the publication
// and its software, the machine, and every argument but --batch (the GPU
// among them). Rows of one workload at different batch sizes form a
// batch-size sweep.
func (r ThroughputRow) Workload() string {
	var args []string
	for i := 0; i < len(r.Args); i++ {
		a := strings.TrimLeft(r.Args[i], "-")
		if a == "batch" {
			i++
			continue
		}
		if strings.HasPrefix(a, "batch=") {
			continue
		}
		args = append(args, r.Args[i])
	}
	return r.Source + " | " + r.Software + " | " + r.System + " | " + strings.Join(args, " ")
}

// setup names the publication, software, machine, GPU and precision: rows
// of one setup with different models are compared by their order.
func (r ThroughputRow) setup() string {
	return r.Source + " | " + r.Software + " | " + r.System + " | " + r.GPU + " | " + r.Precision()
}

// ThroughputRequest is the prediction request of a row: its command line
// read as 'batchfit estimate' reads it (EstimateRequest), with float32
// matmuls in TF32 where the row ran that way. NGC containers set
// TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which turns
// torch.backends.cuda.matmul.allow_tf32 on whatever PyTorch's default
// (and PyTorch before 1.12, in the older containers, had it on by
// default); no estimate flag says so, so the row's tf32_matmul column
// does.
func ThroughputRequest(r ThroughputRow) (predict.Request, error) {
	args := r.Args
	if len(args) == 0 {
		return predict.Request{}, errors.New("field \"args\" is empty, expected an estimate command line")
	}
	if m := args[0]; r.Root != "" && !filepath.IsAbs(m) && (strings.HasSuffix(m, ".bfgraph") || strings.HasSuffix(m, ".bfgraph.gz")) {
		args = append([]string{filepath.Join(r.Root, m)}, args[1:]...)
	}
	req, err := EstimateRequest(args)
	if err != nil {
		return req, fmt.Errorf("field \"args\": %w", err)
	}
	if req.GPU.Name != r.GPU {
		return req, fmt.Errorf("field \"args\" runs on %q, the row's gpu is %q", req.GPU.Name, r.GPU)
	}
	if r.TF32Matmul {
		p := req.Setup.Profile
		if p == nil {
			p = profile.Default()
		}
		q := *p
		q.MatmulAllowTF32 = true
		req.Setup.Profile = &q
	}
	return req, nil
}

// PredictThroughput is batchfit's samples/s for a row (ThroughputRequest,
// then the whole prediction).
func PredictThroughput(r ThroughputRow) (float64, error) {
	req, err := ThroughputRequest(r)
	if err != nil {
		return 0, err
	}
	res, err := predict.Run(context.Background(), req)
	if err != nil {
		return 0, fmt.Errorf("predicting: %w", err)
	}
	if res.Time == nil {
		return 0, fmt.Errorf("no step time predicted on %s", r.GPU)
	}
	return res.Time.SamplesPerSecond(), nil
}

// ThroughputComparison is one row's predicted samples/s beside the
// published figure; Err is (predicted − measured) / measured.
type ThroughputComparison struct {
	Row                 ThroughputRow
	Batch               int64
	Predicted, Measured float64
	Err                 float64
}

// CompareThroughput predicts every row's samples/s with predict and sets it
// beside the published figure.
func CompareThroughput(rows []ThroughputRow, predict func(ThroughputRow) (float64, error)) ([]ThroughputComparison, error) {
	out := make([]ThroughputComparison, 0, len(rows))
	for _, r := range rows {
		b, err := r.Batch()
		if err != nil {
			return nil, fmt.Errorf("row %s (line %d): %w", r.ID, r.Line, err)
		}
		p, err := predict(r)
		if err != nil {
			return nil, fmt.Errorf("row %s (line %d): %w", r.ID, r.Line, err)
		}
		if !(p > 0) || math.IsInf(p, 0) {
			return nil, fmt.Errorf("row %s (line %d): predicted %g samples/s, expected a positive figure", r.ID, r.Line, p)
		}
		m := r.SamplesPerSecond()
		out = append(out, ThroughputComparison{Row: r, Batch: b, Predicted: p, Measured: m, Err: (p - m) / m})
	}
	return out, nil
}

// ThroughputGroup summarises the comparisons of one source or one GPU.
type ThroughputGroup struct {
	Name string
	// N counts the rows, MedianAbsErr is their median |error|, MedianErr
	// their median signed error, MaxAbsErr the largest |error|.
	N                                  int
	MedianAbsErr, MedianErr, MaxAbsErr float64
}

// Pairs counts pairs of rows measured more than PairGap apart and how many
// of them the prediction orders as measured.
type Pairs struct{ N, Right int }

// Share is Right / N (1 without pairs: nothing was ordered wrong).
func (p Pairs) Share() float64 {
	if p.N == 0 {
		return 1
	}
	return float64(p.Right) / float64(p.N)
}

// PairGap is how far apart (relative to the smaller) two measured figures
// must be for their order to count: closer figures are within the
// spread between machines of one GPU model (Lambda's H100 result sets).
const PairGap = 0.05

// SaturationGap is the gain in samples/s below which a step up in batch
// size counts as flat.
const SaturationGap = 0.05

// Saturation holds one batch-size sweep (a workload published at three or
// more batch sizes): at each step up in batch size, whether the measured
// and the predicted throughput still grow by more than SaturationGap.
type Saturation struct {
	Workload string
	Batches  []int64
	// MeasuredFlat[i] and PredictedFlat[i] are for the step from
	// Batches[i] to Batches[i+1].
	MeasuredFlat, PredictedFlat []bool
	// Measured and Predicted split the step time, batch / samples per
	// second, into a fixed part and a part per sample: the line through
	// the two largest batches, read at the smallest for the fixed part.
	// The fixed part is what makes small batches slow.
	Measured, Predicted StepLine
}

// Agrees reports whether the predicted curve flattens at the same steps
// as the measured one.
func (s Saturation) Agrees() bool {
	for i := range s.MeasuredFlat {
		if s.MeasuredFlat[i] != s.PredictedFlat[i] {
			return false
		}
	}
	return true
}

// ThroughputSummary holds the calibration figures.
type ThroughputSummary struct {
	// All is every row compared; BySource, ByGPU, ByFamily and ByModel
	// split them.
	All                                ThroughputGroup
	BySource, ByGPU, ByFamily, ByModel []ThroughputGroup
	// ModelPairs are pairs of different models in one setup (publication,
	// software, machine, GPU, precision); BatchPairs pairs of batch sizes of one
	// workload.
	ModelPairs, BatchPairs Pairs
	Saturation             []Saturation
}

// SummarizeThroughput computes the calibration figures of cs.
func SummarizeThroughput(cs []ThroughputComparison) ThroughputSummary {
	var s ThroughputSummary
	s.All = group("all", cs)
	s.BySource = groupBy(cs, func(c ThroughputComparison) string { return c.Row.Source })
	s.ByGPU = groupBy(cs, func(c ThroughputComparison) string { return c.Row.GPU })
	s.ByFamily = groupBy(cs, func(c ThroughputComparison) string { return c.Row.Family() })
	s.ByModel = groupBy(cs, func(c ThroughputComparison) string { return c.Row.Model() + " " + c.Row.Precision() })
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			a, b := cs[i], cs[j]
			var p *Pairs
			switch {
			case a.Row.Workload() == b.Row.Workload() && a.Batch != b.Batch:
				p = &s.BatchPairs
			case a.Row.setup() == b.Row.setup() && a.Row.Model() != b.Row.Model():
				p = &s.ModelPairs
			default:
				continue
			}
			if !apart(a.Measured, b.Measured) {
				continue
			}
			p.N++
			if (a.Measured > b.Measured) == (a.Predicted > b.Predicted) {
				p.Right++
			}
		}
	}
	sweeps := map[string][]ThroughputComparison{}
	var order []string
	for _, c := range cs {
		w := c.Row.Workload()
		if _, ok := sweeps[w]; !ok {
			order = append(order, w)
		}
		sweeps[w] = append(sweeps[w], c)
	}
	for _, w := range order {
		sw := sweeps[w]
		sort.SliceStable(sw, func(i, j int) bool { return sw[i].Batch < sw[j].Batch })
		// One figure per batch size: repeated ones (none in the committed
		// set) would make a step of zero.
		var pts []ThroughputComparison
		for _, c := range sw {
			if len(pts) > 0 && pts[len(pts)-1].Batch == c.Batch {
				continue
			}
			pts = append(pts, c)
		}
		if len(pts) < 3 {
			continue
		}
		sat := Saturation{Workload: w}
		for i, c := range pts {
			sat.Batches = append(sat.Batches, c.Batch)
			if i == 0 {
				continue
			}
			prev := pts[i-1]
			sat.MeasuredFlat = append(sat.MeasuredFlat, c.Measured < prev.Measured*(1+SaturationGap))
			sat.PredictedFlat = append(sat.PredictedFlat, c.Predicted < prev.Predicted*(1+SaturationGap))
		}
		a, b, z := pts[len(pts)-2], pts[len(pts)-1], pts[0]
		sat.Measured = stepLine(z.Batch, z.Measured, a.Batch, a.Measured, b.Batch, b.Measured)
		sat.Predicted = stepLine(z.Batch, z.Predicted, a.Batch, a.Predicted, b.Batch, b.Predicted)
		s.Saturation = append(s.Saturation, sat)
	}
	return s
}

// StepLine is a sweep's step time as a line in the batch size: Fixed
// seconds a step, PerSample seconds a sample.
type StepLine struct{ Fixed, PerSample float64 }

// stepLine fits the step times of batches a and b (samples per second
// ta, tb) and reads the fixed part at batch z.
func stepLine(z int64, tz float64, a int64, ta float64, b int64, tb float64) StepLine {
	sa, sb := float64(a)/ta, float64(b)/tb
	per := (sb - sa) / float64(b-a)
	return StepLine{Fixed: float64(z)/tz - float64(z)*per, PerSample: per}
}

// apart reports whether x and y differ by more than PairGap of the smaller.
func apart(x, y float64) bool {
	lo, hi := math.Min(x, y), math.Max(x, y)
	return hi > lo*(1+PairGap)
}

func group(name string, cs []ThroughputComparison) ThroughputGroup {
	abs := make([]float64, len(cs))
	signed := make([]float64, len(cs))
	for i, c := range cs {
		abs[i], signed[i] = math.Abs(c.Err), c.Err
	}
	g := ThroughputGroup{Name: name, N: len(cs), MedianAbsErr: median(abs), MedianErr: median(signed)}
	for _, a := range abs {
		g.MaxAbsErr = math.Max(g.MaxAbsErr, a)
	}
	return g
}

func groupBy(cs []ThroughputComparison, key func(ThroughputComparison) string) []ThroughputGroup {
	by := map[string][]ThroughputComparison{}
	for _, c := range cs {
		by[key(c)] = append(by[key(c)], c)
	}
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]ThroughputGroup, len(names))
	for i, n := range names {
		out[i] = group(n, by[n])
	}
	return out
}
