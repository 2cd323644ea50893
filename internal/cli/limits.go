package cli

import (
	"flag"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
)

// bound is the largest value of a numeric flag: cli on the command line,
// web in a request to batchfit serve (answered on the server's machine,
// so tighter). 0 in cli: no bound of the flag's own; the sizes it makes
// are bounded (graph.MaxBytes, graph.MaxOps).
type bound struct{ cli, web int64 }

// bounds is the one table of the numeric flags' bounds: the command
// line's come from the library's (predict's), which refuses beyond them
// whoever asks, and the server's are read from here too (webLimit).
var bounds = map[string]bound{
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

// checkBounds refuses a numeric flag set beyond its command-line bound,
// naming the flag, before any work starts.
func checkBounds(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		b, ok := bounds[f.Name]
		if !ok || b.cli == 0 || err != nil {
			return
		}
		n, perr := strconv.ParseInt(strings.TrimSpace(f.Value.String()), 0, 64)
		if perr == nil && n > b.cli {
			err = usagef("--%s %d: at most %d (see 'batchfit %s -h')", f.Name, n, b.cli, fs.Name())
		}
	})
	return err
}
