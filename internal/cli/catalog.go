package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/models"
)

func runModels(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("models", stderr, "usage: batchfit models [--json]\n\nLists the built-in zoo.\n")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	type entry struct {
		Name        string   `json:"name"`
		Family      string   `json:"family"`
		ParamCount  int64    `json:"param_count"`
		DefaultSeq  int64    `json:"default_seq,omitempty"`
		Dims        []string `json:"dims,omitempty"`
		Description string   `json:"description"`
	}
	var out []entry
	for _, m := range models.All() {
		g, err := m.Build(models.Config{Batch: 1, Seq: min(m.DefaultSeq, 8)})
		if err != nil {
			return fmt.Errorf("building %s: %w", m.Name, err)
		}
		e := entry{Name: m.Name, Family: m.Family, ParamCount: g.ParamCount(), DefaultSeq: m.DefaultSeq, Description: m.Description}
		for _, d := range m.Dims {
			e.Dims = append(e.Dims, string(d))
		}
		out = append(out, e)
	}
	if *asJSON {
		return report.WriteJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFAMILY\tPARAMETERS\tDESCRIPTION")
	for _, e := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Family, report.Commas(e.ParamCount), e.Description)
	}
	return tw.Flush()
}

func runGPUs(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("gpus", stderr, "usage: batchfit gpus [--json]\n\nLists the GPU catalog.\n")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	type entry struct {
		Name          string `json:"name"`
		Device        string `json:"device"`
		CapacityBytes int64  `json:"capacity_bytes"`
		SMITotalBytes int64  `json:"nvidia_smi_total_bytes"`
		CapacityFrom  string `json:"capacity_from"`
		Compute       string `json:"compute_capability"`
		ContextBytes  int64  `json:"cuda_context_bytes"`
		// dense peaks, FLOP/s and bytes/s, from Source
		FP32      float64 `json:"fp32_flops"`
		TF32      float64 `json:"tf32_flops"`
		FP16      float64 `json:"fp16_flops"`
		BF16      float64 `json:"bf16_flops"`
		Bandwidth float64 `json:"memory_bandwidth_bytes"`
		Source    string  `json:"rates_source"`
		// the step-time model's per-GPU and per-architecture data
		SMs                 int     `json:"sm_count"`
		BoostMHz            float64 `json:"boost_clock_mhz,omitempty"`
		SMFrom              string  `json:"sm_from"`
		AchievableMatmul    float64 `json:"achievable_matmul_share"`
		AchievableBandwidth float64 `json:"achievable_bandwidth_share"`
		AchievableFrom      string  `json:"achievable_from"`
	}
	var out []entry
	for _, g := range gpu.All() {
		r := g.Rates
		out = append(out, entry{g.Name, g.Marketing, g.Capacity, g.SMITotal, g.CapacityFrom, fmt.Sprintf("%d.%d", g.Major, g.Minor), g.ContextSize,
			r.FP32, r.TF32, r.FP16, r.BF16, r.Bandwidth, r.Source, r.SMs, r.BoostMHz, r.SMSource, r.Achievable.Matmul, r.Achievable.Bandwidth, r.Achievable.Source})
	}
	if *asJSON {
		return report.WriteJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDEVICE\tCAPACITY\tNVIDIA-SMI\tCOMPUTE\tCUDA CONTEXT\tFP32\tTF32\tBF16\tFP16\tBANDWIDTH")
	tf := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%g T", v/1e12)
	}
	for _, e := range out {
		derived := ""
		if strings.HasPrefix(e.CapacityFrom, "derived") {
			derived = " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%d MiB)%s\t%d MiB\t%s\t%s\t%s\t%s\t%s\t%s\t%g TB/s\n", e.Name, e.Device, report.FormatBytes(e.CapacityBytes), e.CapacityBytes>>20, derived, e.SMITotalBytes>>20,
			e.Compute, report.FormatBytes(e.ContextBytes), tf(e.FP32), tf(e.TF32), tf(e.BF16), tf(e.FP16), e.Bandwidth/1e12)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nCapacity is what PyTorch can use: cudaMemGetInfo's total as PyTorch's out-of-memory messages print it")
	fmt.Fprintln(stdout, "(\"total capacity\"), from public reports; * marks one derived from nvidia-smi's total where no")
	fmt.Fprintln(stdout, "message was found (--json gives each figure's source). Fit decisions use it, not nvidia-smi's total.")
	fmt.Fprintln(stdout, "\nRates are dense peaks (FLOP/s; the datasheets' tensor figures \"with sparsity\" halved), from:")
	seen := map[string]bool{}
	for _, e := range out {
		if !seen[e.Source] {
			seen[e.Source] = true
			fmt.Fprintf(stdout, "  %s\n", e.Source)
		}
	}
	return nil
}
