package report

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/solve"
	"github.com/batchfit/batchfit/trace"
)

// SweepChart draws a sweep: peak allocated, peak reserved and device total
// over batch size, the GPU's capacity as a rule, the largest swept batch
// that fits marked, and step time on the right axis when the GPU's rates
// are known.
func SweepChart(pts []solve.Point) *chart.Chart {
	first := pts[0].Result
	c := &chart.Chart{
		Title: "Memory over batch size: " + first.Model,
		X:     chart.Axis{Label: "batch size"},
		Y:     chart.Axis{Label: "memory", Unit: chart.Bytes},
	}
	lo, hi := pts[0].Value, pts[0].Value
	for _, p := range pts {
		lo, hi = min(lo, p.Value), max(hi, p.Value)
	}
	c.X.Log2 = hi >= 8*lo
	// the setup without the batch, which the x axis gives
	c.Subtitle = sweepSetupLine(pts)
	var alloc, res, total, secs, need []chart.Point
	fit := -1
	for i, p := range pts {
		x := float64(p.Value)
		r := p.Result
		alloc = append(alloc, chart.Point{X: x, Y: float64(r.Timeline.PeakAllocated)})
		res = append(res, chart.Point{X: x, Y: float64(r.Timeline.PeakReserved)})
		total = append(total, chart.Point{X: x, Y: float64(r.DeviceTotal)})
		if r.Time != nil {
			secs = append(secs, chart.Point{X: x, Y: r.Time.Seconds})
		}
		// A batch that runs out of memory stops the replay: its figures
		// are those at the failure, so what it needs is drawn too.
		if r.Timeline.OOM != nil {
			need = append(need, chart.Point{X: x, Y: float64(predict.Need(r))})
		}
		if r.Fits && (fit < 0 || p.Value > pts[fit].Value) {
			fit = i
		}
	}
	c.Lines = []chart.Series{
		{Name: "peak allocated", Points: alloc, Dots: true},
		{Name: "peak reserved", Points: res, Dots: true},
		{Name: "device total", Points: total, Dots: true, Dashed: true},
	}
	if len(need) > 0 {
		c.Lines = append(c.Lines, chart.Series{Name: "needs at least (out of memory)", Class: "oom-need", Points: need, Dots: true, Dashed: true})
	}
	if len(secs) == len(pts) {
		c.Y2 = &chart.Axis{Label: "step time", Unit: chart.Seconds}
		c.Lines = append(c.Lines, chart.Series{Name: "step time", Points: secs, Dots: true, Right: true})
	}
	c.Rules = []chart.Rule{{Value: float64(first.GPU.Capacity), Class: "capacity",
		Label: fmt.Sprintf("%s capacity %s", first.GPU.Name, FormatBytes(first.GPU.Capacity))}}
	// "fits" is with the margin (sweep --margin): a device total between
	// this rule and the capacity does not fit, and the chart says why.
	if m := first.Margin; m > 0 {
		c.Rules = append(c.Rules, chart.Rule{Value: float64(first.GPU.Capacity - m), Class: "margin",
			Label: fmt.Sprintf("with the margin of %s: %s", FormatBytes(m), FormatBytes(first.GPU.Capacity-m))})
	}
	switch {
	case fit >= 0 && len(need) == 0 && allFit(pts):
		// the largest tried, not a limit: the limit lies beyond the sweep
		p := pts[fit]
		c.Markers = []chart.Marker{{X: float64(p.Value), Y: float64(p.Result.DeviceTotal), Class: "largest-tried",
			Label: fmt.Sprintf("all fit; largest tried: %d", p.Value)}}
		c.Subtitle += " · every batch swept fits: the limit lies beyond"
	case fit >= 0:
		p := pts[fit]
		c.Markers = []chart.Marker{{X: float64(p.Value), Y: float64(p.Result.DeviceTotal), Class: "largest-fit",
			Label: fmt.Sprintf("largest batch that fits: %d", p.Value)}}
	default:
		c.Subtitle += " · no batch swept fits"
	}
	return c
}

func allFit(pts []solve.Point) bool {
	for _, p := range pts {
		if !p.Result.Fits {
			return false
		}
	}
	return true
}

// sweepSetupLine is the setup of a sweep: the setup line with the swept
// batch sizes in place of the first point's batch.
func sweepSetupLine(pts []solve.Point) string {
	first := pts[0].Result
	lo, hi := pts[0].Value, pts[0].Value
	for _, p := range pts {
		lo, hi = min(lo, p.Value), max(hi, p.Value)
	}
	what := fmt.Sprintf("batch %d to %d (%d sizes)", lo, hi, len(pts))
	if len(pts) == 1 {
		what = fmt.Sprintf("batch %d", lo)
	}
	return strings.Replace(SetupLine(first), fmt.Sprintf(" · batch %d", first.Config.Batch), " · "+what, 1)
}

// stepRecorder keeps a replay's state for the timeline charts
// (alloc.StepRecorder).
type stepRecorder = alloc.StepRecorder

func newStepRecorder(buckets int) *stepRecorder { return alloc.NewStepRecorder(buckets) }

// points gives each stretch [from, to) of events two points, at its
// start and at its end (the next one's start), so that lines and areas
// are drawn as the steps the allocator's state takes.
func points(r *stepRecorder, v func(b *alloc.StateBucket) int64) []chart.Point {
	bs := r.Buckets()
	pts := make([]chart.Point, 0, 2*len(bs))
	for k := range bs {
		b := &bs[k]
		y := float64(v(b))
		pts = append(pts, chart.Point{X: float64(b.From), Y: y}, chart.Point{X: float64(b.To), Y: y})
	}
	return pts
}

// bands turns the phase runs into the chart's shaded stretches.
func bands(r *stepRecorder) []chart.Band {
	var out []chart.Band
	for _, p := range r.Phases() {
		if p.Phase == trace.Setup {
			continue
		}
		out = append(out, chart.Band{From: float64(p.From), To: float64(p.To), Class: p.Phase.String(),
			Label: fmt.Sprintf("%s %d", p.Phase, p.Step+1)})
	}
	return out
}

// TimelineChart draws a predicted training run over its events: allocated
// bytes stacked by what they hold, reserved bytes as a line, the phases as
// bands and the allocated peak marked with what holds it.
func TimelineChart(res *predict.Result, rec *stepRecorder) *chart.Chart {
	tl := res.Timeline
	c := &chart.Chart{
		Title:    "Memory over the simulated steps: " + res.Model,
		Subtitle: SetupLine(res),
		X:        chart.Axis{Label: fmt.Sprintf("allocator event (%s events, %d steps)", Commas(int64(rec.Events())), len(tl.Steps))},
		Y:        chart.Axis{Label: "memory", Unit: chart.Bytes},
		Bands:    bands(rec),
	}
	for _, cat := range trace.Categories() {
		seen := false
		for _, b := range rec.Buckets() {
			if b.ByCategory[cat] != 0 {
				seen = true
				break
			}
		}
		if !seen {
			continue
		}
		c.Stack = append(c.Stack, chart.Series{Name: strings.ReplaceAll(cat.String(), "_", " "), Class: cat.String(),
			Points: points(rec, func(b *alloc.StateBucket) int64 { return b.ByCategory[cat] })})
	}
	c.Lines = []chart.Series{{Name: "reserved", Points: points(rec, func(b *alloc.StateBucket) int64 { return b.Reserved })}}
	usable := res.GPU.Capacity - res.Context
	if 4*tl.PeakReserved >= usable {
		c.Rules = append(c.Rules, chart.Rule{Value: float64(usable), Class: "capacity",
			Label: fmt.Sprintf("%s's capacity less the CUDA context: %s", res.GPU.Name, FormatBytes(usable))})
	} else {
		c.Subtitle += fmt.Sprintf(" · %s's capacity less the CUDA context, %s, off the chart", res.GPU.Name, FormatBytes(usable))
	}
	if tl.PeakAllocatedEvent >= 0 {
		c.Markers = append(c.Markers, chart.Marker{X: float64(tl.PeakAllocatedEvent), Y: float64(tl.PeakAllocated), Class: "peak",
			Label: peakLabel(res)})
	}
	if tl.OOM != nil {
		c.Markers = append(c.Markers, chart.Marker{X: float64(tl.OOMEvent), Y: float64(usable), Class: "oom",
			Label: "out of memory: " + tl.OOM.Error()})
	}
	return c
}

// peakLabel names the peak and the two categories that hold most of it.
func peakLabel(res *predict.Result) string {
	tl := res.Timeline
	type part struct {
		name string
		n    int64
	}
	var parts []part
	for _, c := range trace.Categories() {
		if n := tl.AtPeak[c]; n > 0 {
			parts = append(parts, part{strings.ReplaceAll(c.String(), "_", " "), n})
		}
	}
	for i := range parts { // largest first, stable for equal sizes
		for j := i + 1; j < len(parts); j++ {
			if parts[j].n > parts[i].n {
				parts[i], parts[j] = parts[j], parts[i]
			}
		}
	}
	s := "peak " + FormatBytes(tl.PeakAllocated)
	var held []string
	for i, p := range parts {
		if i == 2 {
			break
		}
		held = append(held, p.name+" "+FormatBytes(p.n))
	}
	if len(held) > 0 {
		s += ": " + strings.Join(held, ", ")
	}
	if at := res.PeakAt; at != nil {
		s += fmt.Sprintf(" (%s, step %d)", at.Phase, at.Step+1)
	}
	return s
}

// SnapshotChart draws the replay of a measured snapshot: allocated and
// reserved over its events, with the replay's allocated peak marked by its
// largest allocation site.
func SnapshotChart(name string, rec *stepRecorder, tl *alloc.Timeline, top []SiteJSON, whatIf string, whatIfRec *stepRecorder) *chart.Chart {
	c := &chart.Chart{
		Title: "Memory over the snapshot's events: " + filepath.Base(name),
		X:     chart.Axis{Label: fmt.Sprintf("recorded allocator event (%s events)", Commas(int64(rec.Events())))},
		Y:     chart.Axis{Label: "memory", Unit: chart.Bytes},
	}
	c.Lines = []chart.Series{
		{Name: "allocated", Points: points(rec, func(b *alloc.StateBucket) int64 { return b.Allocated })},
		{Name: "reserved", Points: points(rec, func(b *alloc.StateBucket) int64 { return b.Reserved })},
	}
	if whatIfRec != nil {
		c.Lines = append(c.Lines, chart.Series{Name: "reserved with " + whatIf, Class: "what-if", Dashed: true,
			Points: points(whatIfRec, func(b *alloc.StateBucket) int64 { return b.Reserved })})
	}
	if tl.PeakAllocatedEvent >= 0 {
		label := "peak " + FormatBytes(tl.PeakAllocated)
		if len(top) > 0 {
			label += ": largest site " + top[0].Site + " " + FormatBytes(top[0].Bytes)
		}
		c.Markers = []chart.Marker{{X: float64(tl.PeakAllocatedEvent), Y: float64(tl.PeakAllocated), Class: "peak", Label: label}}
	}
	return c
}
