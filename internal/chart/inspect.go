package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Doc is what a rendered chart says, read back from its SVG: the
// structure that tests assert and scripts read, without pixels.
type Doc struct {
	Title string
	// Axes maps "x", "y" and "y2" to the axis' label and tick values.
	Axes map[string]DocAxis
	// Lines and Layers are the line series and the stacked layers by
	// name.
	Lines  map[string]DocSeries
	Layers map[string]DocSeries
	Rules  []Rule
	Bands  []Band
	// Markers carry X, Y and Label.
	Markers []Marker
	Legend  []string
}

// DocAxis is one axis read back.
type DocAxis struct {
	Label string
	Ticks []float64
	// TickLabels are the printed labels, in tick order.
	TickLabels []string
}

// DocSeries is one series read back: its axis (lines), point count,
// largest value and, where the chart drew dots, the points.
type DocSeries struct {
	Axis   string
	Count  int
	Max    float64
	Points []Point
}

// Inspect reads a document Render wrote.
func Inspect(svg []byte) (*Doc, error) {
	d := &Doc{Axes: map[string]DocAxis{}, Lines: map[string]DocSeries{}, Layers: map[string]DocSeries{}}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	// the open <g> elements and their classes
	var stack []string
	var axis, series string
	inTick := false
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the chart: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			at := attrs(t)
			cls := strings.Fields(at["class"])
			has := func(c string) bool {
				for _, x := range cls {
					if x == c {
						return true
					}
				}
				return false
			}
			text.Reset()
			switch t.Name.Local {
			case "g":
				stack = append(stack, at["class"])
				switch {
				case has("axis"):
					axis = second(cls)
					d.Axes[axis] = DocAxis{Label: at["data-label"]}
				case has("tick") && axis != "":
					a := d.Axes[axis]
					a.Ticks = append(a.Ticks, parseNum(at["data-value"]))
					d.Axes[axis] = a
					inTick = true
				case has("series"):
					series = at["data-name"]
					n, _ := strconv.Atoi(at["data-points"])
					d.Lines[series] = DocSeries{Axis: at["data-axis"], Count: n, Max: parseNum(at["data-max"])}
				case has("layer"):
					n, _ := strconv.Atoi(at["data-points"])
					d.Layers[at["data-name"]] = DocSeries{Count: n, Max: parseNum(at["data-max"])}
				case has("rule"):
					d.Rules = append(d.Rules, Rule{Value: parseNum(at["data-value"]), Label: at["data-label"], Class: second(cls)})
				case has("band"):
					d.Bands = append(d.Bands, Band{From: parseNum(at["data-from"]), To: parseNum(at["data-to"]), Label: at["data-label"], Class: second(cls)})
				case has("marker"):
					d.Markers = append(d.Markers, Marker{X: parseNum(at["data-x"]), Y: parseNum(at["data-y"]), Label: at["data-label"], Class: second(cls)})
				case has("entry"):
					d.Legend = append(d.Legend, at["data-name"])
				}
			case "circle":
				if series != "" && at["data-x"] != "" {
					s := d.Lines[series]
					s.Points = append(s.Points, Point{parseNum(at["data-x"]), parseNum(at["data-y"])})
					d.Lines[series] = s
				}
			}
		case xml.CharData:
			text.Write(t)
		case xml.EndElement:
			switch t.Name.Local {
			case "title":
				if d.Title == "" {
					d.Title = text.String()
				}
			case "text":
				if inTick && axis != "" {
					a := d.Axes[axis]
					a.TickLabels = append(a.TickLabels, text.String())
					d.Axes[axis] = a
				}
			case "g":
				if len(stack) == 0 {
					return nil, errors.New("reading the chart: unbalanced groups")
				}
				cls := strings.Fields(stack[len(stack)-1])
				stack = stack[:len(stack)-1]
				if len(cls) > 0 {
					switch cls[0] {
					case "axis":
						axis = ""
					case "tick":
						inTick = false
					case "series":
						series = ""
					}
				}
			}
		}
	}
	return d, nil
}

// second is an element's second class (the first says what it is, the
// second which one), "" when it has none.
func second(cls []string) string {
	if len(cls) < 2 {
		return ""
	}
	return cls[1]
}

func attrs(t xml.StartElement) map[string]string {
	m := make(map[string]string, len(t.Attr))
	for _, a := range t.Attr {
		m[a.Name.Local] = a.Value
	}
	return m
}

func parseNum(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
