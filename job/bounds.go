package job

import (
	"flag"
	"math"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
)

// Bound is the largest value of a numeric flag: CLI on the command line,
// Web in a request to batchfit serve (answered on the server's machine,
// so tighter). 0 in CLI: no bound of the flag's own; the sizes it makes
// are bounded (graph.MaxBytes, graph.MaxOps).
type Bound struct{ CLI, Web int64 }

// Bounds is the one table of the numeric flags' bounds: the command
// line's come from the library's (predict's), which refuses beyond them
// whoever asks, and the server's are read from here too (the server's check of a request).
var Bounds = map[string]Bound{
	"steps":           {predict.MaxSteps, 20},
	"layers":          {predict.MaxLayers, 512},
	"hidden":          {0, 65536},
	"seq":             {0, 131072},
	"image":           {0, 4096},
	"accumulate":      {predict.MaxAccumulate, 256},
	"max-accumulate":  {predict.MaxAccumulate, 256},
	"global-batch":    {0, 1 << 20},
	"min-micro-batch": {0, 1 << 20},
	"limit":           {0, 1 << 20},
	"top":             {1000, 50},
	"max-predictions": {0, plan.DefaultMaxPredictions},
	"device":          {0, 64},
	"lora":            {0, 4096},
	"gpus":            {0, 1 << 16},
	"node-gpus":       {0, 1 << 16},
	"tp":              {0, 1024},
	"pp":              {predict.MaxLayers, 64},
	"stage":           {predict.MaxLayers - 1, 63},
	"prompt":          {0, 131072},
	"new-tokens":      {predict.MaxNewTokens, 8192},
	"beams":           {0, 64},
}

// positive are the numeric flags whose default (0, or the solver's own
// limit) means "the model's" or "derived": given on the command line, 0
// or less is refused rather than taken silently as that default.
var positive = map[string]string{
	"seq":          "a sequence length",
	"layers":       "a number of layers",
	"hidden":       "a hidden size",
	"image":        "an image side",
	"limit":        "the largest value to try",
	"global-batch": "samples per optimizer step",
}

// fractions are the float flags and the range each takes, from the
// library's own check: lo ≤ v, v < hi (hi excluded when open), or
// v > lo when lo is open. NaN and ±Inf are refused for all of them.
var fractions = map[string]struct {
	lo, hi         float64
	loOpen, hiOpen bool
	what           string
}{
	// torch.optim.SGD.__init__ raises "Invalid momentum value" below 0;
	// at 1 or more the buffer (buf.mul_(momentum).add_(grad)) never
	// decays, which no training uses
	"momentum": {0, 1, false, true, "SGD's momentum, from 0 up to (not including) 1"},
	// every torch.optim optimizer raises "Invalid weight_decay value"
	// below 0
	"weight-decay": {0, math.Inf(1), false, true, "a weight decay of 0 or more"},
	// PEFT's LoraLayer.update_layer takes nn.Dropout(p=lora_dropout);
	// graph.Adapters.Check keeps it below 1 (a dropout of 1 zeroes every
	// adapter input)
	"lora-dropout": {0, 1, false, true, "a dropout probability, from 0 up to (not including) 1"},
	// PEFT's scaling = lora_alpha / r: 0 or less makes the adapters
	// contribute nothing or the opposite
	"lora-alpha": {0, math.Inf(1), true, true, "a positive alpha"},
}

// CheckBounds refuses a numeric flag set beyond its command-line bound,
// an explicit 0 or negative where the default stands for "the model's",
// and a float flag out of its range or not a number, naming the flag,
// before any work starts.
func CheckBounds(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		v := strings.TrimSpace(f.Value.String())
		if r, ok := fractions[f.Name]; ok {
			x, perr := strconv.ParseFloat(v, 64)
			if perr == nil && (math.IsNaN(x) || math.IsInf(x, 0) || x < r.lo || r.loOpen && x == r.lo || x > r.hi || r.hiOpen && x == r.hi) {
				err = Usagef("--%s %s: want %s (see 'batchfit %s -h')", f.Name, v, r.what, fs.Name())
			}
			return
		}
		n, perr := strconv.ParseInt(v, 0, 64)
		if perr != nil {
			return
		}
		if what, ok := positive[f.Name]; ok && n <= 0 {
			err = Usagef("--%s must be positive (%s), got %d: leave the flag out for the default (see 'batchfit %s -h')", f.Name, what, n, fs.Name())
			return
		}
		if b, ok := Bounds[f.Name]; ok && b.CLI != 0 && n > b.CLI {
			err = Usagef("--%s %d: at most %d (see 'batchfit %s -h')", f.Name, n, b.CLI, fs.Name())
		}
	})
	return err
}
