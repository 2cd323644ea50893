package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Unit says how an axis prints its values.
type Unit uint8

const (
	// Plain prints numbers as they are (batch sizes, event indexes).
	Plain Unit = iota
	// Bytes prints binary multiples (KiB, MiB, GiB), as PyTorch does.
	Bytes
	// Seconds prints µs, ms or s.
	Seconds
)

// Axis is one axis of a chart.
type Axis struct {
	Label string
	Unit  Unit
	// Log2 spaces the axis by powers of two (batch sizes that double).
	Log2 bool
	// Min and Max fix the domain when Max > Min; otherwise it is fitted to
	// the data (from zero for a linear value axis).
	Min, Max float64
}

// Point is one (x, y) value.
type Point struct{ X, Y float64 }

// Series is a line, or a layer of a stacked area.
type Series struct {
	// Name is shown in the legend and written as data-name.
	Name string
	// Class picks the colour (see the style sheet in Render) and is
	// written as the element's class; empty takes the series' name with
	// spaces as dashes.
	Class  string
	Points []Point
	// Right puts a line on the second value axis.
	Right bool
	// Dots draws every point as a circle with data-x and data-y.
	Dots bool
	// Dashed draws the line dashed.
	Dashed bool
}

// Rule is a horizontal line across the plot at a value of the left axis.
type Rule struct {
	Value float64
	Label string
	Class string
}

// Band shades a stretch of the x axis (a phase of the training step).
type Band struct {
	From, To float64
	Label    string
	Class    string
}

// Marker points at one place of the plot, on the left axis.
type Marker struct {
	X, Y  float64
	Label string
	Class string
}

// Chart is everything one SVG shows.
type Chart struct {
	Title    string
	Subtitle string
	X, Y     Axis
	// Y2 is the second value axis (right), for lines with Right set; nil
	// when no line uses it.
	Y2 *Axis
	// Stack is drawn as stacked areas, first at the bottom; every layer
	// must have the same x values.
	Stack   []Series
	Lines   []Series
	Rules   []Rule
	Bands   []Band
	Markers []Marker
	// Width and Height in pixels; zero takes 880 × 460.
	Width, Height int
}

// Render writes c as a standalone SVG document.
func (c *Chart) Render(w io.Writer) error {
	var b bytes.Buffer
	if err := c.render(&b); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// SVG returns c as a standalone SVG document.
func (c *Chart) SVG() ([]byte, error) {
	var b bytes.Buffer
	err := c.render(&b)
	return b.Bytes(), err
}

const style = `
text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:12px;fill:#222}
.title{font-size:15px;font-weight:600}.subtitle{fill:#555}
.axis line,.axis path{stroke:#444;stroke-width:1}.grid{stroke:#e3e3e3;stroke-width:1}
.axis-label{font-size:12px;fill:#444}
.line{fill:none;stroke-width:2}.dashed{stroke-dasharray:6 4}
.rule line{stroke:#b00020;stroke-width:1.5;stroke-dasharray:8 4}.rule text{fill:#b00020}
.marker circle{fill:#fff;stroke:#111;stroke-width:2}.marker line{stroke:#111;stroke-width:1}
.band rect{opacity:.5}.band text{fill:#666;font-size:11px}
.band.forward rect{fill:#dbe9f6}.band.backward rect{fill:#fbe3cf}.band.optimizer rect{fill:#d9f0d3}.band.loss rect,.band.zero_grad rect,.band.setup rect{fill:#eee}
.peak-allocated,.allocated{stroke:#1f77b4;fill:#1f77b4}.peak-reserved,.reserved{stroke:#d62728;fill:#d62728}
.device-total{stroke:#7f7f7f;fill:#7f7f7f}.oom-need{stroke:#b00020;fill:#b00020}.step-time{stroke:#2ca02c;fill:#2ca02c}
.parameters{fill:#4e79a7;stroke:#4e79a7}.gradients{fill:#f28e2b;stroke:#f28e2b}.optimizer_state{fill:#59a14f;stroke:#59a14f}
.activations{fill:#e15759;stroke:#e15759}.transient{fill:#edc948;stroke:#edc948}.batch_data{fill:#b07aa1;stroke:#b07aa1}
.workspace{fill:#9c755f;stroke:#9c755f}.autocast_cache{fill:#76b7b2;stroke:#76b7b2}.buffers{fill:#ff9da7;stroke:#ff9da7}.other{fill:#bab0ac;stroke:#bab0ac}
.area{stroke-width:0;opacity:.85}
.line.peak-allocated,.line.allocated,.line.peak-reserved,.line.reserved,.line.device-total,.line.step-time,.line.oom-need{fill:none}
.legend text{font-size:12px}
`

// palette colours the classes the style sheet does not know, in order.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

var known = map[string]bool{}

// scopedStyle is style with every selector under .bfchart.
var scopedStyle = scope(style, ".bfchart")

func scope(css, root string) string {
	var b strings.Builder
	for _, rule := range strings.SplitAfter(css, "}") {
		sel, body, ok := strings.Cut(rule, "{")
		if !ok {
			b.WriteString(rule)
			continue
		}
		var sels []string
		for _, x := range strings.Split(strings.TrimSpace(sel), ",") {
			sels = append(sels, root+" "+strings.TrimSpace(x))
		}
		b.WriteString("\n" + strings.Join(sels, ",") + "{" + body)
	}
	return b.String()
}

func init() {
	for _, f := range strings.FieldsFunc(style, func(r rune) bool { return r == ',' || r == '{' || r == '}' || r == '\n' }) {
		if strings.HasPrefix(f, ".") && !strings.ContainsAny(f, " :;") {
			known[f[1:]] = true
		}
	}
}

// layout is the plot's place in the picture and the scales that map
// values to it.
type layout struct {
	w, h                     float64
	left, right, top, bottom float64 // plot edges
	x, y, y2                 scale
}

func (c *Chart) render(b *bytes.Buffer) error {
	if err := c.check(); err != nil {
		return err
	}
	lay := c.layout()
	// No id: a page may inline several charts. The title, the first
	// child, names the picture; the style sheet is scoped to the chart's
	// own class so that an inlined chart does not restyle the page.
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="bfchart" viewBox="0 0 %s %s" width="%s" height="%s" role="img">`+"\n",
		num(lay.w), num(lay.h), num(lay.w), num(lay.h))
	fmt.Fprintf(b, "<title>%s</title>\n<style>%s</style>\n", esc(c.Title), scopedStyle)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(b, `<text class="title" x="%s" y="20">%s</text>`+"\n", num(lay.left), esc(c.Title))
	for i, line := range c.subtitleLines(lay.w - lay.left - 10) {
		fmt.Fprintf(b, `<text class="subtitle" x="%s" y="%d">%s</text>`+"\n", num(lay.left), 36+15*i, esc(line))
	}
	c.drawBands(b, &lay)
	c.drawGrid(b, &lay)
	c.drawStack(b, &lay)
	c.drawLines(b, &lay)
	c.drawRules(b, &lay)
	c.drawMarkers(b, &lay)
	c.drawAxes(b, &lay)
	c.drawLegend(b, &lay)
	b.WriteString("</svg>\n")
	return nil
}

func (c *Chart) check() error {
	finite := func(vs ...float64) bool {
		for _, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
		return true
	}
	for _, s := range append(append([]Series{}, c.Stack...), c.Lines...) {
		for _, p := range s.Points {
			if !finite(p.X, p.Y) {
				return fmt.Errorf("chart %q: series %q has a point that is not a number", c.Title, s.Name)
			}
			if c.X.Log2 && p.X <= 0 {
				return fmt.Errorf("chart %q: series %q has x %g on a logarithmic axis", c.Title, s.Name, p.X)
			}
		}
		if s.Right && c.Y2 == nil {
			return fmt.Errorf("chart %q: series %q is on the right axis, which the chart does not have", c.Title, s.Name)
		}
	}
	for i := 1; i < len(c.Stack); i++ {
		if len(c.Stack[i].Points) != len(c.Stack[0].Points) {
			return fmt.Errorf("chart %q: stacked series %q has %d points, %q has %d", c.Title, c.Stack[i].Name, len(c.Stack[i].Points), c.Stack[0].Name, len(c.Stack[0].Points))
		}
		for j, p := range c.Stack[i].Points {
			if p.X != c.Stack[0].Points[j].X {
				return errors.New("chart " + strconv.Quote(c.Title) + ": stacked series do not share their x values")
			}
		}
	}
	for _, r := range c.Rules {
		if !finite(r.Value) {
			return fmt.Errorf("chart %q: rule %q is not a number", c.Title, r.Label)
		}
	}
	for _, m := range c.Markers {
		if !finite(m.X, m.Y) {
			return fmt.Errorf("chart %q: marker %q is not a number", c.Title, m.Label)
		}
	}
	for _, bd := range c.Bands {
		if !finite(bd.From, bd.To) {
			return fmt.Errorf("chart %q: band %q is not a number", c.Title, bd.Label)
		}
	}
	return nil
}

func (c *Chart) layout() layout {
	lay := layout{w: 880, h: 460}
	if c.Width > 0 && c.Height > 0 {
		lay.w, lay.h = float64(c.Width), float64(c.Height)
	}
	lay.left = 84
	lay.top = 52 + 15*float64(max(len(c.subtitleLines(lay.w-lay.left-10))-1, 0))
	lay.right = lay.w - 24
	if c.Y2 != nil {
		lay.right = lay.w - 78
	}
	lay.bottom = lay.h - 58 - 18*float64(c.legendRows())

	// x domain: every x of the data
	xlo, xhi := math.Inf(1), math.Inf(-1)
	ylo, yhi := 0.0, 0.0
	y2hi := 0.0
	see := func(x float64) { xlo, xhi = math.Min(xlo, x), math.Max(xhi, x) }
	tops := c.stackTops()
	for _, p := range tops {
		see(p.X)
		yhi = math.Max(yhi, p.Y)
	}
	for _, s := range c.Lines {
		for _, p := range s.Points {
			see(p.X)
			if s.Right {
				y2hi = math.Max(y2hi, p.Y)
			} else {
				yhi = math.Max(yhi, p.Y)
				ylo = math.Min(ylo, p.Y)
			}
		}
	}
	for _, r := range c.Rules {
		yhi = math.Max(yhi, r.Value)
	}
	for _, m := range c.Markers {
		see(m.X)
		yhi = math.Max(yhi, m.Y)
	}
	for _, bd := range c.Bands {
		see(bd.From)
		see(bd.To)
	}
	if math.IsInf(xlo, 1) {
		xlo, xhi = 0, 1
	}
	lay.x = newScale(c.X, xlo, xhi, lay.left, lay.right, false)
	lay.y = newScale(c.Y, ylo, yhi*1.04, lay.bottom, lay.top, true)
	if c.Y2 != nil {
		lay.y2 = newScale(*c.Y2, 0, y2hi*1.04, lay.bottom, lay.top, true)
	}
	return lay
}

// stackTops is the top of the stacked areas at each x.
func (c *Chart) stackTops() []Point {
	if len(c.Stack) == 0 {
		return nil
	}
	tops := make([]Point, len(c.Stack[0].Points))
	for i, p := range c.Stack[0].Points {
		tops[i].X = p.X
	}
	for _, s := range c.Stack {
		for i, p := range s.Points {
			tops[i].Y += p.Y
		}
	}
	return tops
}

func (c *Chart) drawBands(b *bytes.Buffer, lay *layout) {
	if len(c.Bands) == 0 {
		return
	}
	b.WriteString("<g class=\"bands\">\n")
	for _, bd := range c.Bands {
		x0, x1 := lay.x.at(bd.From), lay.x.at(bd.To)
		fmt.Fprintf(b, `<g class="band %s" data-from="%s" data-to="%s" data-label="%s"><rect x="%s" y="%s" width="%s" height="%s"/>`,
			esc(classOf(bd.Class, bd.Label)), val(bd.From), val(bd.To), esc(bd.Label), num(x0), num(lay.top), num(math.Max(x1-x0, 0.5)), num(lay.bottom-lay.top))
		// a label only where it has room
		if x1-x0 >= 7*float64(len(bd.Label)) {
			fmt.Fprintf(b, `<text x="%s" y="%s">%s</text>`, num(x0+3), num(lay.top+12), esc(bd.Label))
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</g>\n")
}

func (c *Chart) drawGrid(b *bytes.Buffer, lay *layout) {
	b.WriteString("<g class=\"grid-lines\">\n")
	for _, t := range lay.y.ticks {
		y := lay.y.at(t)
		fmt.Fprintf(b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(lay.left), num(y), num(lay.right), num(y))
	}
	b.WriteString("</g>\n")
}

func (c *Chart) drawStack(b *bytes.Buffer, lay *layout) {
	if len(c.Stack) == 0 {
		return
	}
	b.WriteString("<g class=\"stack\">\n")
	base := make([]float64, len(c.Stack[0].Points))
	for _, s := range c.Stack {
		var d strings.Builder
		for i, p := range s.Points {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s", cmd, num(lay.x.at(p.X)), num(lay.y.at(base[i]+p.Y)))
		}
		for i := len(s.Points) - 1; i >= 0; i-- {
			fmt.Fprintf(&d, "L%s %s", num(lay.x.at(s.Points[i].X)), num(lay.y.at(base[i])))
		}
		var peak float64
		for i, p := range s.Points {
			base[i] += p.Y
			peak = math.Max(peak, p.Y)
		}
		if len(s.Points) > 0 {
			d.WriteString("Z")
		}
		cls := classOf(s.Class, s.Name)
		fmt.Fprintf(b, `<g class="layer" data-name="%s" data-points="%d" data-max="%s"><path class="area %s" d="%s"%s/></g>`+"\n",
			esc(s.Name), len(s.Points), val(peak), esc(cls), d.String(), c.fill(cls))
	}
	b.WriteString("</g>\n")
}

// fill colours a class the style sheet does not know from the palette.
func (c *Chart) fill(cls string) string {
	if known[cls] {
		return ""
	}
	return fmt.Sprintf(` style="fill:%s;stroke:%s"`, c.colour(cls), c.colour(cls))
}

func (c *Chart) colour(cls string) string {
	i := 0
	for _, s := range append(append([]Series{}, c.Stack...), c.Lines...) {
		k := classOf(s.Class, s.Name)
		if known[k] {
			continue
		}
		if k == cls {
			return palette[i%len(palette)]
		}
		i++
	}
	return palette[0]
}

func (c *Chart) drawLines(b *bytes.Buffer, lay *layout) {
	for _, s := range c.Lines {
		sc := &lay.y
		side := "left"
		if s.Right {
			sc, side = &lay.y2, "right"
		}
		cls := classOf(s.Class, s.Name)
		var d strings.Builder
		for i, p := range s.Points {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%s %s", cmd, num(lay.x.at(p.X)), num(sc.at(p.Y)))
		}
		dash := ""
		if s.Dashed {
			dash = " dashed"
		}
		st := ""
		if !known[cls] {
			st = fmt.Sprintf(` style="stroke:%s;fill:none"`, c.colour(cls))
		}
		peak := math.Inf(-1)
		for _, p := range s.Points {
			peak = math.Max(peak, p.Y)
		}
		if len(s.Points) == 0 {
			peak = 0
		}
		fmt.Fprintf(b, `<g class="series %s" data-name="%s" data-axis="%s" data-points="%d" data-max="%s"><path class="line %s%s" d="%s"%s/>`,
			esc(cls), esc(s.Name), side, len(s.Points), val(peak), esc(cls), dash, d.String(), st)
		if s.Dots {
			for _, p := range s.Points {
				fmt.Fprintf(b, `<circle class="%s" cx="%s" cy="%s" r="3" data-x="%s" data-y="%s"%s/>`,
					esc(cls), num(lay.x.at(p.X)), num(sc.at(p.Y)), val(p.X), val(p.Y), c.fill(cls))
			}
		}
		b.WriteString("</g>\n")
	}
}

// drawRules labels each rule below its line: a marker's label sits above
// its point, and the point of interest is often just under a capacity.
func (c *Chart) drawRules(b *bytes.Buffer, lay *layout) {
	for _, r := range c.Rules {
		y := lay.y.at(r.Value)
		fmt.Fprintf(b, `<g class="rule %s" data-value="%s" data-label="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/><text x="%s" y="%s" text-anchor="end">%s</text></g>`+"\n",
			esc(classOf(r.Class, r.Label)), val(r.Value), esc(r.Label), num(lay.left), num(y), num(lay.right), num(y), num(lay.right-4), num(y+15), esc(r.Label))
	}
}

func (c *Chart) drawMarkers(b *bytes.Buffer, lay *layout) {
	for _, m := range c.Markers {
		x, y := lay.x.at(m.X), lay.y.at(m.Y)
		// the label goes to the side with room, else it is centred
		// where it fits best
		wide := textWidth(m.Label)
		anchor, dx := "start", 8.0
		switch {
		case x+8+wide <= lay.w-4:
		case x-8-wide >= 4:
			anchor, dx = "end", -8
		default:
			anchor, dx = "middle", math.Max(4+wide/2, math.Min(x, lay.w-4-wide/2))-x
		}
		ly := math.Max(y-14, lay.top+14)
		fmt.Fprintf(b, `<g class="marker %s" data-x="%s" data-y="%s" data-label="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/><circle cx="%s" cy="%s" r="5"/><text x="%s" y="%s" text-anchor="%s">%s</text></g>`+"\n",
			esc(classOf(m.Class, "marker")), val(m.X), val(m.Y), esc(m.Label), num(x), num(y), num(x), num(lay.bottom), num(x), num(y), num(x+dx), num(ly), anchor, esc(m.Label))
	}
}

func (c *Chart) drawAxes(b *bytes.Buffer, lay *layout) {
	fmt.Fprintf(b, `<g class="axis x" data-label="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n",
		esc(c.X.Label), num(lay.left), num(lay.bottom), num(lay.right), num(lay.bottom))
	for _, t := range lay.x.ticks {
		x := lay.x.at(t)
		fmt.Fprintf(b, `<g class="tick" data-value="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/><text x="%s" y="%s" text-anchor="middle">%s</text></g>`+"\n",
			val(t), num(x), num(lay.bottom), num(x), num(lay.bottom+5), num(x), num(lay.bottom+18), esc(lay.x.label(t)))
	}
	fmt.Fprintf(b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle">%s</text></g>`+"\n",
		num((lay.left+lay.right)/2), num(lay.bottom+36), esc(c.X.Label))
	c.drawValueAxis(b, lay, &lay.y, c.Y.Label, "y", lay.left, -1)
	if c.Y2 != nil {
		c.drawValueAxis(b, lay, &lay.y2, c.Y2.Label, "y2", lay.right, 1)
	}
}

func (c *Chart) drawValueAxis(b *bytes.Buffer, lay *layout, sc *scale, label, cls string, x, dir float64) {
	fmt.Fprintf(b, `<g class="axis %s" data-label="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n",
		cls, esc(label), num(x), num(lay.top), num(x), num(lay.bottom))
	anchor := "end"
	if dir > 0 {
		anchor = "start"
	}
	for _, t := range sc.ticks {
		y := sc.at(t)
		fmt.Fprintf(b, `<g class="tick" data-value="%s"><line x1="%s" y1="%s" x2="%s" y2="%s"/><text x="%s" y="%s" text-anchor="%s">%s</text></g>`+"\n",
			val(t), num(x), num(y), num(x+5*dir), num(y), num(x+8*dir), num(y+4), anchor, esc(sc.label(t)))
	}
	lx := x + 66*dir
	fmt.Fprintf(b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text></g>`+"\n",
		num(lx), num((lay.top+lay.bottom)/2), num(lx), num((lay.top+lay.bottom)/2), esc(label))
}

type legendEntry struct{ name, cls, kind string }

func (c *Chart) legend() []legendEntry {
	var es []legendEntry
	for i := len(c.Stack) - 1; i >= 0; i-- {
		es = append(es, legendEntry{c.Stack[i].Name, classOf(c.Stack[i].Class, c.Stack[i].Name), "area"})
	}
	for _, s := range c.Lines {
		es = append(es, legendEntry{s.Name, classOf(s.Class, s.Name), "line"})
	}
	return es
}

// legendSlots places the legend's entries left to right, each as wide
// as its name, wrapping to a new row when the next would not fit width:
// the x offset and row of each.
func (c *Chart) legendSlots(width float64) (xs []float64, rows []int) {
	x, row := 0.0, 0
	for _, e := range c.legend() {
		w := 19 + textWidth(e.name) + 22
		if x > 0 && x+w > width {
			x, row = 0, row+1
		}
		xs, rows = append(xs, x), append(rows, row)
		x += w
	}
	return xs, rows
}

func (c *Chart) legendRows() int {
	w := 880.0
	if c.Width > 0 {
		w = float64(c.Width)
	}
	_, rows := c.legendSlots(w - 84 - 24)
	if len(rows) == 0 {
		return 0
	}
	return rows[len(rows)-1] + 1
}

func (c *Chart) drawLegend(b *bytes.Buffer, lay *layout) {
	es := c.legend()
	if len(es) == 0 {
		return
	}
	b.WriteString("<g class=\"legend\">\n")
	xs, rows := c.legendSlots(lay.w - 84 - 24)
	for i, e := range es {
		x := lay.left + xs[i]
		y := lay.bottom + 54 + 18*float64(rows[i])
		mark := fmt.Sprintf(`<rect class="area %s" x="%s" y="%s" width="14" height="10"%s/>`, esc(e.cls), num(x), num(y-9), c.fill(e.cls))
		if e.kind == "line" {
			st := ""
			if !known[e.cls] {
				st = fmt.Sprintf(` style="stroke:%s;fill:none"`, c.colour(e.cls))
			}
			mark = fmt.Sprintf(`<path class="line %s" d="M%s %sh14"%s/>`, esc(e.cls), num(x), num(y-4), st)
		}
		fmt.Fprintf(b, `<g class="entry" data-name="%s">%s<text x="%s" y="%s">%s</text></g>`+"\n", esc(e.name), mark, num(x+19), num(y), esc(e.name))
	}
	b.WriteString("</g>\n")
}

// textWidth guesses the width of a label at 12 px (there is no font
// metric in a standalone document): an average of 6.6 px a character.
func textWidth(s string) float64 { return 6.6 * float64(len([]rune(s))) }

// subtitleLines breaks the subtitle at its " · " separators into lines
// that fit width.
func (c *Chart) subtitleLines(width float64) []string {
	if c.Subtitle == "" {
		return nil
	}
	var lines []string
	cur := ""
	for _, part := range strings.Split(c.Subtitle, " · ") {
		switch {
		case cur == "":
			cur = part
		case textWidth(cur+" · "+part) <= width:
			cur += " · " + part
		default:
			lines = append(lines, cur)
			cur = part
		}
	}
	return append(lines, cur)
}

func classOf(cls, name string) string {
	if cls != "" {
		return cls
	}
	return strings.ReplaceAll(strings.ToLower(name), " ", "-")
}

// num prints a coordinate or value: integers as integers, others with at
// most one decimal (a tenth of a pixel), so documents stay small and stable.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// val prints a value for a data- attribute: exactly, so that what a
// chart is read back as equals what it was given.
func val(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&#39;")
		default:
			// only what XML 1.0 allows in a document
			if r < 0x20 && r != '\t' && r != '\n' || r >= 0xD800 && r <= 0xDFFF || r == 0xFFFE || r == 0xFFFF || r > 0x10FFFF {
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
