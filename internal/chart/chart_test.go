package chart

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func sample() *Chart {
	return &Chart{
		Title:    `Memory <of> "a & b"`,
		Subtitle: "one · two",
		X:        Axis{Label: "batch size", Log2: true},
		Y:        Axis{Label: "memory", Unit: Bytes},
		Y2:       &Axis{Label: "step time", Unit: Seconds},
		Lines: []Series{
			{Name: "peak allocated", Points: []Point{{1, 1 << 30}, {2, 2 << 30}, {4, 5 << 30}}, Dots: true},
			{Name: "step time", Points: []Point{{1, 0.01}, {2, 0.02}, {4, 0.04}}, Dots: true, Right: true},
			{Name: "unknown class", Points: []Point{{1, 0}, {4, 1}}},
		},
		Rules:   []Rule{{Value: 8 << 30, Label: "capacity 8 GiB", Class: "capacity"}},
		Markers: []Marker{{X: 2, Y: 2 << 30, Label: "largest batch that fits: 2", Class: "largest-fit"}},
	}
}

// What a chart is given is what it is read back as: the structure tests
// rest on this.
func TestRoundTrip(t *testing.T) {
	svg, err := sample().SVG()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Inspect(svg)
	if err != nil {
		t.Fatal(err)
	}
	if d.Title != `Memory <of> "a & b"` {
		t.Errorf("title %q", d.Title)
	}
	if got := d.Axes["x"].Ticks; !slices.Equal(got, []float64{1, 2, 4}) {
		t.Errorf("x ticks %v, want the powers of two 1 2 4", got)
	}
	// A value axis starts at zero and ends at a round number at or above
	// the data: the 8 GiB rule × 1.04 is 8.32 GiB, a fifth of it rounds up
	// to 2 GiB steps, so 0 to 10 GiB.
	y := d.Axes["y"]
	if !slices.Equal(y.Ticks, []float64{0, 2 << 30, 4 << 30, 6 << 30, 8 << 30, 10 << 30}) || y.TickLabels[1] != "2 GiB" {
		t.Errorf("y ticks %v %v", y.Ticks, y.TickLabels)
	}
	if y2 := d.Axes["y2"]; y2.Label != "step time" || !strings.HasSuffix(y2.TickLabels[1], " ms") {
		t.Errorf("y2 %+v", y2)
	}
	pa := d.Lines["peak allocated"]
	if pa.Axis != "left" || pa.Count != 3 || !slices.Equal(pa.Points, []Point{{1, 1 << 30}, {2, 2 << 30}, {4, 5 << 30}}) {
		t.Errorf("peak allocated %+v", pa)
	}
	if st := d.Lines["step time"]; st.Axis != "right" || st.Points[2] != (Point{4, 0.04}) {
		t.Errorf("step time %+v", st)
	}
	if len(d.Rules) != 1 || d.Rules[0].Value != 8<<30 || d.Rules[0].Class != "capacity" {
		t.Errorf("rules %+v", d.Rules)
	}
	if len(d.Markers) != 1 || d.Markers[0].X != 2 || d.Markers[0].Label != "largest batch that fits: 2" {
		t.Errorf("markers %+v", d.Markers)
	}
	if strings.Join(d.Legend, ",") != "peak allocated,step time,unknown class" {
		t.Errorf("legend %v", d.Legend)
	}
	// A class the style sheet does not know is coloured inline.
	if !bytes.Contains(svg, []byte(`class="line unknown-class" d="`)) || !bytes.Contains(svg, []byte(`style="stroke:#1f77b4;fill:none"`)) {
		t.Error("the unknown class has no colour of its own")
	}
}

// Text from the user (a model's file name) cannot break out of the
// document.
func TestEscapes(t *testing.T) {
	c := sample()
	c.Title = `</title><script>alert(1)</script>`
	c.Lines[0].Name = `x" onload="alert(1)`
	svg, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(svg, []byte("<script")) || bytes.Contains(svg, []byte(`" onload="`)) {
		t.Fatalf("unescaped input in %s", svg)
	}
	d, err := Inspect(svg)
	if err != nil {
		t.Fatal(err)
	}
	if d.Title != c.Title {
		t.Errorf("title read back as %q", d.Title)
	}
}

func TestStack(t *testing.T) {
	c := &Chart{Title: "t", X: Axis{Label: "event"}, Y: Axis{Label: "memory", Unit: Bytes},
		Stack: []Series{
			{Name: "parameters", Points: []Point{{0, 10}, {1, 10}, {2, 10}}},
			{Name: "activations", Points: []Point{{0, 0}, {1, 30}, {2, 5}}},
		},
		Bands: []Band{{From: 0, To: 1, Label: "forward 1", Class: "forward"}, {From: 1, To: 2, Label: "backward 1", Class: "backward"}},
	}
	svg, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Inspect(svg)
	if err != nil {
		t.Fatal(err)
	}
	if l := d.Layers["activations"]; l.Count != 3 || l.Max != 30 {
		t.Errorf("activations layer %+v", l)
	}
	if len(d.Bands) != 2 || d.Bands[1].Class != "backward" || d.Bands[1].From != 1 {
		t.Errorf("bands %+v", d.Bands)
	}
	// The stack's top (40) sets the value axis.
	y := d.Axes["y"].Ticks
	if y[len(y)-1] < 40 {
		t.Errorf("y ticks %v end below the stack's top", y)
	}
	// The legend lists the top layer first, as it is drawn.
	if strings.Join(d.Legend, ",") != "activations,parameters" {
		t.Errorf("legend %v", d.Legend)
	}
}

func TestBadCharts(t *testing.T) {
	cases := map[string]*Chart{
		"not a number": {Title: "t", Lines: []Series{{Name: "a", Points: []Point{{0, math.NaN()}}}}},
		"logarithmic":  {Title: "t", X: Axis{Log2: true}, Lines: []Series{{Name: "a", Points: []Point{{0, 1}}}}},
		"right axis":   {Title: "t", Lines: []Series{{Name: "a", Points: []Point{{1, 1}}, Right: true}}},
		"stack length": {Title: "t", Stack: []Series{{Name: "a", Points: []Point{{1, 1}}}, {Name: "b"}}},
		"stack xs":     {Title: "t", Stack: []Series{{Name: "a", Points: []Point{{1, 1}}}, {Name: "b", Points: []Point{{2, 1}}}}},
		"rule":         {Title: "t", Rules: []Rule{{Value: math.Inf(1)}}},
		"marker":       {Title: "t", Markers: []Marker{{X: math.NaN()}}},
	}
	for name, c := range cases {
		if _, err := c.SVG(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// An empty chart is a frame with axes, not an error.
	if _, err := (&Chart{Title: "empty"}).SVG(); err != nil {
		t.Errorf("empty chart: %v", err)
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ raw, want float64 }{
		{0.7, 1}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {12, 20}, {0.031, 0.05}, {450, 500}, {0, 1}, {math.NaN(), 1},
	} {
		if got := niceStep(c.raw); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("niceStep(%g) = %g, want %g", c.raw, got, c.want)
		}
	}
}

func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		unit Unit
		hi   float64
		want string // label of the second tick: a fifth of the range, rounded up to 1, 2 or 5
	}{
		{Bytes, 40 << 30, "10 GiB"},
		{Bytes, 300 << 20, "100 MiB"},
		{Bytes, 600, "200 B"},
		{Seconds, 0.25, "50 ms"},
		{Seconds, 0.0004, "100 µs"},
		{Seconds, 3, "1 s"},
		{Seconds, 2, "0.5 s"},
		{Plain, 60000, "20,000"},
	} {
		s := newScale(Axis{Unit: c.unit}, 0, c.hi, 0, 100, true)
		if len(s.ticks) < 2 || s.label(s.ticks[1]) != c.want {
			t.Errorf("unit %d up to %g: second tick %q, want %q", c.unit, c.hi, s.label(s.ticks[1]), c.want)
		}
	}
}

// Rendering twice gives the same bytes: golden files depend on it.
func TestDeterministic(t *testing.T) {
	a, _ := sample().SVG()
	b, _ := sample().SVG()
	if !bytes.Equal(a, b) {
		t.Fatal("two renders differ")
	}
}

func BenchmarkRender(b *testing.B) {
	c := &Chart{Title: "bench", X: Axis{Label: "event"}, Y: Axis{Label: "memory", Unit: Bytes}}
	for k := 0; k < 10; k++ {
		var pts []Point
		for i := 0; i < 640; i++ {
			pts = append(pts, Point{float64(i), float64((i * (k + 1)) % 977 << 20)})
		}
		c.Stack = append(c.Stack, Series{Name: "layer", Class: "activations", Points: pts})
	}
	for i := 0; i < b.N; i++ {
		if _, err := c.SVG(); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzInspect: any bytes give a document or an error, never a panic.
func FuzzInspect(f *testing.F) {
	svg, _ := sample().SVG()
	f.Add(svg)
	f.Add([]byte(`<svg><g class="axis"><g class="tick" data-value="x"></g></g></svg>`))
	f.Add([]byte(`<g class="series"></g></g>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		Inspect(b)
	})
}

// One batch size: the point in the middle, whole-number ticks around it;
// a logarithmic axis with no power of two inside ticks its ends.
func TestSinglePoint(t *testing.T) {
	s := newScale(Axis{}, 64, 64, 0, 100, false)
	if !slices.Equal(s.ticks, []float64{63, 64, 65}) || s.at(64) != 50 {
		t.Errorf("ticks %v, 64 at %g", s.ticks, s.at(64))
	}
	l := newScale(Axis{Log2: true}, 5, 7, 0, 100, false)
	if !slices.Equal(l.ticks, []float64{5, 7}) {
		t.Errorf("log ticks %v", l.ticks)
	}
	// ticks are multiples of the step, not sums of steps
	v := newScale(Axis{}, 0, 3.2, 0, 100, true)
	for _, x := range v.ticks {
		if x != math.Round(x/0.5)*0.5 {
			t.Errorf("tick %v is not a multiple of the step", x)
		}
	}
}

// Characters XML does not allow (user text: a file name) are left out, so
// the document stays readable; the chart's style applies to it alone.
func TestXMLCharacters(t *testing.T) {
	c := sample()
	c.Title = "a\uFFFFb\x00c\uFFFEd"
	svg, err := c.SVG()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Inspect(svg)
	if err != nil {
		t.Fatalf("the chart is not XML: %v", err)
	}
	if d.Title != "abcd" {
		t.Errorf("title %q", d.Title)
	}
	if bytes.Contains(svg, []byte(" id=")) {
		t.Error("a chart carries an id, which two charts on one page would share")
	}
	if !bytes.Contains(svg, []byte(".bfchart text{")) || bytes.Contains(svg, []byte("\ntext{")) {
		t.Error("the style sheet is not scoped to the chart")
	}
}
