package plan

import (
	"errors"
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/suggest"
	"github.com/batchfit/batchfit/train"
)

// The planner's vocabulary: the levers, the question (Options), the
// combinations (Candidate), the plans and the answer.

// Lever is one thing a plan may change.
type Lever string

const (
	Accumulate Lever = "accumulate" // micro-batch × accumulation, the samples per step kept
	Precision  Lever = "precision"  // 32-true, bf16-mixed, 16-mixed, bf16-true
	Checkpoint Lever = "checkpoint" // none, attention cores, every 2nd block, every block
	Optimizer  Lever = "optimizer"  // for-loop, foreach or fused implementation
	Allocator  Lever = "allocator"  // expandable_segments:True
	// Sharding is the data-parallel strategy over the job's --gpus: ddp,
	// ZeRO 1 and 2, FSDP's grad-op and full sharding, full sharding with
	// CPU offload.
	Sharding Lever = "sharding"
	// Tensor is Megatron-style tensor parallelism with sequence
	// parallelism, 2, 4 or 8 ranks a layer (Llama-family models): each
	// multiplies the GPUs the job takes.
	Tensor Lever = "tensor"
	// Pipeline is pipeline parallelism of 2 or 4 stages (1F1B over the
	// accumulation's micro-batches; Llama-family models): each multiplies
	// the GPUs the job takes.
	Pipeline Lever = "pipeline"
	// LoRA trains adapters on a frozen base instead of every parameter
	// (PEFT's defaults for the model family), or QLoRA's adapters on a
	// base stored in 4-bit NF4: a change to what is trained.
	LoRA Lever = "lora"
	// OptimizerKind swaps Adam for bitsandbytes' 8-bit Adam, plain or
	// paged, or transformers' Adafactor: a change to how it is optimised.
	OptimizerKind Lever = "optimizer-kind"
)

// Levers lists every lever.
func Levers() []Lever {
	return []Lever{Accumulate, Precision, Checkpoint, Optimizer, Allocator, Sharding, Tensor, Pipeline, LoRA, OptimizerKind}
}

// Tune is what a plan changes of what is trained.
type Tune string

const (
	// FullTune trains what the job trains.
	FullTune Tune = ""
	// LoRATune trains LoRA adapters (PEFT's LoraConfig defaults, r=8,
	// lora_alpha=8, on the family's default target modules) with every
	// other parameter frozen.
	LoRATune Tune = "lora"
	// QLoRATune is LoRA on a base whose Linear weights bitsandbytes
	// stores in 4-bit NF4 with double quantization (Dettmers et al. 2023,
	// QLoRA), dequantized to the precision's compute dtype.
	QLoRATune Tune = "qlora"
)

// ParseLevers reads a comma-separated list of lever names.
func ParseLevers(s string) ([]Lever, error) {
	var names []string
	for _, l := range Levers() {
		names = append(names, string(l))
	}
	var out []Lever
	for _, part := range strings.Split(s, ",") {
		p := strings.ToLower(strings.TrimSpace(part))
		if p == "" {
			continue
		}
		ok := false
		for _, l := range Levers() {
			if string(l) == p {
				out = append(out, l)
				ok = true
			}
		}
		if !ok {
			msg := fmt.Sprintf("unknown lever %q", part)
			if near := suggest.Nearest(p, names, 2); len(near) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
			}
			return nil, fmt.Errorf("%s (levers: %s)", msg, strings.Join(names, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no lever named in %q (levers: %s)", s, strings.Join(names, ", "))
	}
	return out, nil
}

// Objective orders the plans.
type Objective int

const (
	// Throughput ranks plans by predicted samples a second per GPU: the
	// fewest GPU-seconds a step (step time × GPUs), the global batch
	// being the same for every plan.
	Throughput Objective = iota
	// FewestChanges ranks plans by how many levers they move from the
	// current setup, then as Throughput does: the smallest changes that
	// fit.
	FewestChanges
)

// Options describe a planning question.
type Options struct {
	// Base is the current job. Its Config.Batch and Setup.Accumulate give
	// the micro-batch and accumulation the plans are compared with.
	Base predict.Request
	// GlobalBatch is the samples per optimizer step every plan keeps, over
	// all data-parallel ranks (default Base's micro-batch × accumulation
	// × ranks). The current setup must make it.
	GlobalBatch int64
	// Levers the plans may move (default all).
	Levers []Lever
	// NoCheckpointing forbids activation checkpointing in every plan.
	NoCheckpointing bool
	// MaxAccumulate bounds the accumulation (default 64); MinMicroBatch
	// bounds the micro-batch from below (default 1).
	MaxAccumulate int
	MinMicroBatch int64
	// Margin is the headroom a plan must leave on the device, bytes.
	Margin int64
	// MarginFor, when set, is the headroom a candidate's plan must leave,
	// by the candidate's own request: the band its answer carries depends
	// on what it relies on (predict.Request.Reliances), and the levers
	// change that (LoRA, QLoRA, sharding). Margin is then the least it
	// can be, which the planner's screens take so that they never rule
	// out a plan that fits.
	MarginFor func(predict.Request) (int64, error)
	// Top is the number of plans to find (default 5).
	Top       int
	Objective Objective
	// MaxPredictions bounds the planner's work: the simulations it runs,
	// each pipeline stage one and a screened one a fraction
	// (screenedPerFull; default DefaultMaxPredictions). Past it the
	// search stops and the answer says so (Answer.Stopped).
	MaxPredictions int
}

// DefaultMaxPredictions is the planner's default budget of simulations.
// The examples of the README take 1 to 160 (an 8-GPU Llama-3-8B plan with
// every lever, the most); the combinations are searched most promising
// first, so a search stopped here has tried the likeliest plans. A
// simulation of a 70B model takes a tenth of a second or more, so the
// budget keeps a plan within a minute or so.
const DefaultMaxPredictions = 256

// screenedPerFull is how many screened simulations the budget charges as
// one full simulation. A screened one (predict.Request.Screen) stops once
// the step requests more than the device leaves and never replays the
// allocator: BenchmarkScreenedVsFull measures a full Llama-3-70B step
// under FSDP at 4.6 to 5.7 times a screened one. The budget takes the
// lower end, rounded down, so that it never allows more work than it says.
const screenedPerFull = 4

// errBudget stops a search that has spent its predictions.
var errBudget = errors.New("the planner's budget of predictions is spent")

// Candidate is one combination of the levers.
type Candidate struct {
	Precision  train.Precision
	Checkpoint train.Checkpoint
	Impl       train.Impl
	Expandable bool
	Accumulate int
	MicroBatch int64
	// Parallel is the data-parallel strategy (the job's own unless the
	// sharding lever moves it).
	Parallel train.Parallel
	// TP and SP are the tensor and sequence parallelism, PP the pipeline
	// stages.
	TP int64
	SP bool
	PP int64
	// Tune is what is trained (LoRA, QLoRA; empty: as the job); Optim
	// the optimizer's name when the plan changes it (empty: the job's).
	Tune  Tune
	Optim string
}

// ChangesResults reports a plan that changes what is trained or how it is
// optimised: unlike accumulation, checkpointing, the allocator or the
// layout, it can change the model the job produces. Such plans rank after
// every plan that does not.
func (c Candidate) ChangesResults() bool { return c.resultChanges() > 0 }

// resultChanges counts the levers of what is trained and how it is
// optimised that the candidate moves: the ranking prefers fewer.
func (c Candidate) resultChanges() int { return btoi(c.Tune != FullTune) + btoi(c.Optim != "") }

// Plan is a candidate with what is known of it.
type Plan struct {
	Candidate
	// Changes describes what differs from the current setup.
	Changes []string
	// Result is the prediction, nil for a plan not simulated.
	Result *predict.Result
	// Seconds is the predicted step time.
	Seconds float64
	// Fits: the prediction leaves at least the margin free.
	Fits bool
}

// GPUs is the GPUs the candidate takes: its data-parallel ranks × its
// tensor parallelism × its pipeline stages, each rank of one a rank of the
// others.
func (c Candidate) GPUs() int64 { return Ranks(c.Parallel) * max(c.TP, 1) * max(c.PP, 1) }

// ThroughputPerGPU is samples per second per GPU the plan takes
// (Candidate.GPUs): what the plans are ranked by, since a plan that is
// faster on more GPUs is not the better use of them.
func (p *Plan) ThroughputPerGPU() float64 { return p.Throughput() / float64(p.GPUs()) }

// Throughput is samples per second over all data-parallel ranks.
func (p *Plan) Throughput() float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return float64(p.MicroBatch) * float64(p.Accumulate) * float64(Ranks(p.Parallel)) / p.Seconds
}

// Ranks is the number of data-parallel ranks of a strategy: each takes
// its own micro-batches, so a step's global batch is micro-batch ×
// accumulation × ranks (DDP, FSDP and ZeRO alike).
func Ranks(p train.Parallel) int64 { return int64(max(p.GPUs, 1)) }

// Pruned is a combination ruled out without a full search.
type Pruned struct {
	Precision  train.Precision
	Checkpoint train.Checkpoint
	Impl       train.Impl
	Reason     string
	Parallel   train.Parallel
	// TP, SP and PP are the tensor, sequence and pipeline parallelism.
	TP int64
	SP bool
	PP int64
	// Tune and Optim: what is trained and the optimizer, as in Candidate.
	Tune  Tune
	Optim string
}

// Answer is the planner's answer.
type Answer struct {
	// Base is the current setup at the global batch.
	Base *Plan
	// Best are the plans found, best first: by samples a second per GPU
	// (the fewest GPU-seconds a step), with no step times by the fewest
	// GPUs, then the least device total (see Objective).
	Best []*Plan
	// GPUs is the GPUs the current setup takes (Candidate.GPUs), and
	// SameGPUs the best plan found that takes as many, whether or not it
	// is among Best: the answer for a job that keeps its GPUs (nil when
	// none fits).
	GPUs     int64
	SameGPUs *Plan
	// Evaluated lists every simulated plan, in the order simulated.
	Evaluated []*Plan
	// Pruned lists the combinations not searched, with the reason.
	Pruned []Pruned
	// Need is, when nothing fits, the least device total (margin
	// included) of the plans simulated in full, and NeedFrom names that
	// plan. NeedAtLeast: that plan ran out of memory, so Need is its
	// requested peak with the context, a lower bound (see Need). Plans
	// screened out are not among them: their simulation stopped once
	// they requested more than the device leaves, so what they would
	// need is not known (Screened counts them).
	Need        int64
	NeedFrom    string
	NeedAtLeast bool
	Screened    int
	// StatesNeed is, when nothing fits, the least that the combinations
	// ruled out without simulation need for their parameters, gradients
	// and optimizer state alone, with the context and the margin: a lower
	// bound before any activation, never a device total. StatesFrom
	// names that combination.
	StatesNeed int64
	StatesFrom string
	// Margin is the headroom the plans were held to; with
	// Options.MarginFor (OwnMargins) the least of their own margins.
	Margin     int64
	OwnMargins bool
	// GlobalBatch is the samples of a step over all ranks; RankBatch
	// one rank's share (micro-batch × accumulation), Ranks the
	// data-parallel ranks.
	GlobalBatch, RankBatch, Ranks int64
	// Untimed: no step times (a GPU without rates, or under parallelism
	// one whose interconnect is not known); the plans are ranked by the
	// fewest changes.
	Untimed bool
	// Simulations counts the simulations run (each pipeline stage one),
	// ScreenedSimulations those of them screened out. Against
	// Options.MaxPredictions a screened one counts 1/screenedPerFull of a
	// full one (Spent). Stopped reports that the search stopped at the
	// budget with combinations left unsearched: the plans are the best of
	// those tried.
	Simulations         int
	ScreenedSimulations int
	Stopped             bool
	// req turns a candidate into the request that predicts it
	req func(Candidate) predict.Request
}

// Spent is the budget the simulations spent, in full simulations: a
// screened one counts 1/ScreenedPerFull.
func (a *Answer) Spent() float64 {
	return float64(a.Simulations-a.ScreenedSimulations) + float64(a.ScreenedSimulations)/screenedPerFull
}

// ScreenedPerFull is how many screened simulations the budget charges as
// one full one.
const ScreenedPerFull = screenedPerFull

// request is the prediction request of a candidate of this search.
func (a *Answer) request(c Candidate) predict.Request { return a.req(c) }
