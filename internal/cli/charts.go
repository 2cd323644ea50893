package cli

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

// sweepChart draws a sweep: peak allocated, peak reserved and device total
// over batch size, the GPU's capacity as a rule, the largest swept batch
// that fits marked, and step time on the right axis when the GPU's rates
// are known.
func sweepChart(pts []solve.Point) *chart.Chart {
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
		Label: fmt.Sprintf("%s capacity %s", first.GPU.Name, fmtBytes(first.GPU.Capacity))}}
	// "fits" is with the margin (sweep --margin): a device total between
	// this rule and the capacity does not fit, and the chart says why.
	if m := first.Margin; m > 0 {
		c.Rules = append(c.Rules, chart.Rule{Value: float64(first.GPU.Capacity - m), Class: "margin",
			Label: fmt.Sprintf("with the margin of %s: %s", fmtBytes(m), fmtBytes(first.GPU.Capacity-m))})
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
	return strings.Replace(setupLine(first), fmt.Sprintf(" · batch %d", first.Config.Batch), " · "+what, 1)
}

// stepRecorder keeps the allocator's state over a replay in at most
// 2·buckets stretches of events, each holding the event of its stretch
// with the most allocated (and its bytes by category) and the most
// reserved; the phases of the step are kept as runs. Its memory does not
// grow with the trace.
type stepRecorder struct {
	buckets int
	width   int
	b       []stateBucket
	phases  []phaseRun
	events  int
}

type stateBucket struct {
	from, to  int // events [from, to)
	allocated int64
	reserved  int64
	cat       [trace.NumCategories]int64
}

type phaseRun struct {
	from, to int
	phase    trace.Phase
	step     int32
}

func newStepRecorder(buckets int) *stepRecorder { return &stepRecorder{buckets: buckets, width: 1} }

func (r *stepRecorder) observe(o alloc.Observation) {
	i := o.Event
	r.events = i + 1
	if e := o.E; e != nil {
		if n := len(r.phases); n > 0 && r.phases[n-1].phase == e.Phase && r.phases[n-1].step == e.Step {
			r.phases[n-1].to = i + 1
		} else {
			if len(r.phases) >= 8*r.buckets {
				r.thinPhases()
			}
			r.phases = append(r.phases, phaseRun{from: i, to: i + 1, phase: e.Phase, step: e.Step})
		}
	}
	n := len(r.b)
	if n == 0 || i >= r.b[n-1].from+r.width {
		if n == 2*r.buckets {
			r.halve()
		}
		r.b = append(r.b, stateBucket{from: i, allocated: -1})
		n = len(r.b)
	}
	b := &r.b[n-1]
	b.to = i + 1
	if o.Allocated > b.allocated {
		b.allocated = o.Allocated
		if o.ByCategory != nil {
			b.cat = *o.ByCategory
		}
	}
	b.reserved = max(b.reserved, o.Reserved)
}

// thinPhases drops the phase runs narrower than the stretches drawn, the
// narrowest first, until a quarter of the room is free: with thousands of
// micro-batches a band per pass could not be seen, and would make the
// runs grow with the trace.
func (r *stepRecorder) thinPhases() {
	for w := r.width; len(r.phases) > 6*r.buckets; w *= 2 {
		kept := r.phases[:0]
		for _, p := range r.phases {
			if p.to-p.from >= w {
				kept = append(kept, p)
			}
		}
		r.phases = kept
	}
}

// halve merges neighbouring buckets and doubles the width of new ones.
func (r *stepRecorder) halve() {
	out := r.b[:0]
	for j := 0; j < len(r.b); j += 2 {
		m := r.b[j]
		if j+1 < len(r.b) {
			o := r.b[j+1]
			m.to = o.to
			if o.allocated > m.allocated {
				m.allocated, m.cat = o.allocated, o.cat
			}
			m.reserved = max(m.reserved, o.reserved)
		}
		out = append(out, m)
	}
	r.b = out
	r.width *= 2
}

// points gives each stretch [from, to) of events two points, at its
// start and at its end (the next one's start), so that lines and areas
// are drawn as the steps the allocator's state takes.
func (r *stepRecorder) points(v func(b *stateBucket) int64) []chart.Point {
	pts := make([]chart.Point, 0, 2*len(r.b))
	for k := range r.b {
		b := &r.b[k]
		y := float64(v(b))
		pts = append(pts, chart.Point{X: float64(b.from), Y: y}, chart.Point{X: float64(b.to), Y: y})
	}
	return pts
}

// bands turns the phase runs into the chart's shaded stretches.
func (r *stepRecorder) bands() []chart.Band {
	var out []chart.Band
	for _, p := range r.phases {
		if p.phase == trace.Setup {
			continue
		}
		out = append(out, chart.Band{From: float64(p.from), To: float64(p.to), Class: p.phase.String(),
			Label: fmt.Sprintf("%s %d", p.phase, p.step+1)})
	}
	return out
}

// timelineChart draws a predicted training run over its events: allocated
// bytes stacked by what they hold, reserved bytes as a line, the phases as
// bands and the allocated peak marked with what holds it.
func timelineChart(res *predict.Result, rec *stepRecorder) *chart.Chart {
	tl := res.Timeline
	c := &chart.Chart{
		Title:    "Memory over the simulated steps: " + res.Model,
		Subtitle: setupLine(res),
		X:        chart.Axis{Label: fmt.Sprintf("allocator event (%s events, %d steps)", commas(int64(rec.events)), len(tl.Steps))},
		Y:        chart.Axis{Label: "memory", Unit: chart.Bytes},
		Bands:    rec.bands(),
	}
	for _, cat := range trace.Categories() {
		seen := false
		for k := range rec.b {
			if rec.b[k].cat[cat] != 0 {
				seen = true
				break
			}
		}
		if !seen {
			continue
		}
		c.Stack = append(c.Stack, chart.Series{Name: strings.ReplaceAll(cat.String(), "_", " "), Class: cat.String(),
			Points: rec.points(func(b *stateBucket) int64 { return b.cat[cat] })})
	}
	c.Lines = []chart.Series{{Name: "reserved", Points: rec.points(func(b *stateBucket) int64 { return b.reserved })}}
	usable := res.GPU.Capacity - res.Context
	if 4*tl.PeakReserved >= usable {
		c.Rules = append(c.Rules, chart.Rule{Value: float64(usable), Class: "capacity",
			Label: fmt.Sprintf("%s's capacity less the CUDA context: %s", res.GPU.Name, fmtBytes(usable))})
	} else {
		c.Subtitle += fmt.Sprintf(" · %s's capacity less the CUDA context, %s, off the chart", res.GPU.Name, fmtBytes(usable))
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
	s := "peak " + fmtBytes(tl.PeakAllocated)
	var held []string
	for i, p := range parts {
		if i == 2 {
			break
		}
		held = append(held, p.name+" "+fmtBytes(p.n))
	}
	if len(held) > 0 {
		s += ": " + strings.Join(held, ", ")
	}
	if at := res.PeakAt; at != nil {
		s += fmt.Sprintf(" (%s, step %d)", at.Phase, at.Step+1)
	}
	return s
}

// snapshotChart draws the replay of a measured snapshot: allocated and
// reserved over its events, with the replay's allocated peak marked by its
// largest allocation site.
func snapshotChart(name string, rec *stepRecorder, tl *alloc.Timeline, top []SiteJSON, whatIf string, whatIfRec *stepRecorder) *chart.Chart {
	c := &chart.Chart{
		Title: "Memory over the snapshot's events: " + filepath.Base(name),
		X:     chart.Axis{Label: fmt.Sprintf("recorded allocator event (%s events)", commas(int64(rec.events)))},
		Y:     chart.Axis{Label: "memory", Unit: chart.Bytes},
	}
	c.Lines = []chart.Series{
		{Name: "allocated", Points: rec.points(func(b *stateBucket) int64 { return b.allocated })},
		{Name: "reserved", Points: rec.points(func(b *stateBucket) int64 { return b.reserved })},
	}
	if whatIfRec != nil {
		c.Lines = append(c.Lines, chart.Series{Name: "reserved with " + whatIf, Class: "what-if", Dashed: true,
			Points: whatIfRec.points(func(b *stateBucket) int64 { return b.reserved })})
	}
	if tl.PeakAllocatedEvent >= 0 {
		label := "peak " + fmtBytes(tl.PeakAllocated)
		if len(top) > 0 {
			label += ": largest site " + top[0].Site + " " + fmtBytes(top[0].Bytes)
		}
		c.Markers = []chart.Marker{{X: float64(tl.PeakAllocatedEvent), Y: float64(tl.PeakAllocated), Class: "peak", Label: label}}
	}
	return c
}

// writeChart renders c to path, or to the web request's response.
func (e *env) writeChart(path string, c *chart.Chart) error {
	svg, err := c.SVG()
	if err != nil {
		return err
	}
	if e.chart != nil {
		_, err := e.chart.Write(svg)
		return err
	}
	if !e.policy.files {
		return fmt.Errorf("a web request draws no chart to a file")
	}
	return writeFile(path, svg)
}
