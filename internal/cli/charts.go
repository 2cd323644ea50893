package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/internal/outfile"
)

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
	return outfile.Write(path, svg)
}
