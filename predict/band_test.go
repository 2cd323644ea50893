package predict

import (
	"math"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

func TestBandOf(t *testing.T) {
	cases := []struct {
		name        string
		errs        []float64
		under, over float64
		median      float64
		bad         string
	}{
		// the worst under-prediction is the most negative error, the worst
		// over-prediction the most positive; the median of an even list is
		// the mean of the middle two
		{name: "mixed", errs: []float64{-0.05, 0.02, -0.145, -0.01}, under: 0.145, over: 0.02, median: -0.03},
		{name: "all over", errs: []float64{0.03, 0.01, 0.02}, under: 0, over: 0.03, median: 0.02},
		{name: "all under", errs: []float64{-0.2}, under: 0.2, over: 0, median: -0.2},
		{name: "empty", bad: "no errors"},
		{name: "nothing predicted", errs: []float64{-1}, bad: "above −100 %"},
		{name: "not a number", errs: []float64{math.NaN()}, bad: "finite"},
	}
	for _, c := range cases {
		b, err := BandOf(c.errs, "hand-made")
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s: error %v, want one with %q", c.name, err, c.bad)
			}
			continue
		}
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
		if err != nil || !near(b.Under, c.under) || !near(b.Over, c.over) || !near(b.Median, c.median) || b.Cases != len(c.errs) {
			t.Errorf("%s: %+v, %v; want under %g, over %g, median %g", c.name, b, err, c.under, c.over, c.median)
		}
	}
}

func TestBandMargin(t *testing.T) {
	// A prediction at most 20 % below the real figure: on 10 GiB, a
	// prediction of 8 GiB may be a real 10 GiB, so 2 GiB must stay free.
	b := Band{Under: 0.2}
	if got := b.Margin(10 << 30); got != 2<<30 {
		t.Errorf("margin %d, want %d", got, 2<<30)
	}
	// At the margin's edge the worst real figure the band allows is the
	// capacity itself: p / (1 − under) = capacity.
	for _, c := range []int64{15 << 30, 81003 << 20, 1 << 30} {
		for _, u := range []float64{0.01, 0.145, 0.3} {
			b := Band{Under: u}
			p := c - b.Margin(c)
			if real := float64(p) / (1 - u); real > float64(c)*(1+1e-12) {
				t.Errorf("capacity %d, under %g: a prediction of %d may be %g, above the capacity", c, u, p, real)
			}
		}
	}
	if (Band{}).Margin(80<<30) != 0 {
		t.Error("a band with no under-prediction needs no margin")
	}
}

func TestSafetyBandCommitted(t *testing.T) {
	// The committed band must cover the evidence it names: the worst of
	// the published training runs was 14.5 % under.
	published, err := BandOf([]float64{-0.145}, "published runs, worst")
	if err != nil {
		t.Fatal(err)
	}
	if !SafetyBand.Covers(published) || SafetyBand.Cases <= 0 || SafetyBand.Source == "" || SafetyBand.Under >= 1 {
		t.Errorf("committed band %+v", SafetyBand)
	}
	for _, c := range []struct {
		b    Band
		want string
	}{
		{Band{Under: 0.2557, Over: 0.6771, Cases: 76}, "within −25.6 %/+67.7 % of measured on 76 real GPU figures"},
		{Band{Under: 0.0404, Over: 0.0107, Cases: 7, Limits: 1, Group: "convolutions"},
			"within −4.0 %/+1.1 % of measured on 7 real GPU figures of convolutions and 1 batch that ran out of memory"},
		{Band{Under: 0.1, Over: 0.2, Cases: 9, Limits: 2, Group: "adapters, sharded"},
			"within −10.0 %/+20.0 % of measured on 9 real GPU figures of adapters, sharded and 2 batches that ran out of memory"},
	} {
		if s := c.b.String(); s != c.want {
			t.Errorf("band prints as %q, want %q", s, c.want)
		}
	}
	// every group's band is narrower than the one of all predictions,
	// which answers where a group has too few figures
	for rel, b := range Bands {
		if b.Under > SafetyBand.Under || b.Cases < MinBandFigures || b.Group != rel.String() {
			t.Errorf("%s: %+v", rel, b)
		}
		if got := BandFor(rel); got != b {
			t.Errorf("BandFor(%s) = %+v", rel, got)
		}
	}
	if got := BandFor(ForwardOnly | Quantized); got != SafetyBand {
		t.Errorf("a group with no band of its own: %+v", got)
	}
}

// What a request relies on, from its configuration and its graph.
func TestReliances(t *testing.T) {
	if s := (Convolutions | Adapters).String(); s != "convolutions, adapters" {
		t.Errorf("%q", s)
	}
	if s := Reliance(0).String(); s != "dense training" {
		t.Errorf("%q", s)
	}
	zoo := func(name string) Source {
		m, err := models.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return Zoo{M: m}
	}
	for _, c := range []struct {
		r    Request
		want Reliance
	}{
		{Request{Source: zoo("resnet50")}, Convolutions},
		{Request{Source: zoo("gpt2")}, 0},
		{Request{Source: zoo("gpt2"), Config: models.Config{Adapters: &graph.Adapters{Rank: 8, Targets: []string{"c_attn"}}}}, Adapters},
		{Request{Source: zoo("gpt2"), Infer: &Inference{}}, ForwardOnly},
		// the CPU runs no cuDNN
		{Request{Source: zoo("resnet50"), Setup: train.Setup{CPU: true}}, 0},
	} {
		got, err := c.r.Reliances()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.r.Source.Name(), got, c.want)
		}
	}
}
