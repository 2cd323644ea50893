package train

import (
	"strings"
	"testing"
)

// Lightning 2.x converts "64", "32", "16" and "bf16" to 64-true, 32-true,
// 16-mixed and bf16-mixed (_PRECISION_INPUT_STR_ALIAS_CONVERSION in
// lightning/fabric/plugins/precision/precision.py); its full names are read
// as they are.
func TestParsePrecisionFollowsLightning(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Precision
		err  string
	}{
		{"32-true", FP32, ""},
		{"16-mixed", Mixed16, ""},
		{"bf16-mixed", MixedBF16, ""},
		{"16-true", True16, ""},
		{"bf16-true", TrueBF16, ""},
		{"32", FP32, ""},
		{"16", Mixed16, ""},
		{"bf16", MixedBF16, ""},
		{"BF16", MixedBF16, ""},
		{"fp32", FP32, ""},
		{"64", "", "float64"},
		{"64-true", "", "float64"},
		{"transformer-engine", "", "Transformer Engine"},
		{"transformer-engine-float16", "", "Transformer Engine"},
		{"fp16", "", "ambiguous: say 16-mixed"},
		{"bfloat16", "", "ambiguous: say bf16-mixed"},
		{"fp8", "", "unknown precision"},
	} {
		got, err := ParsePrecision(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: got %q, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// Any string either names one of the five precisions or is refused.
func FuzzParsePrecision(f *testing.F) {
	for _, s := range []string{"bf16", "16", "32-true", "64", "transformer-engine", "fp16", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrecision(s)
		if err != nil {
			return
		}
		switch p {
		case FP32, Mixed16, MixedBF16, True16, TrueBF16:
		default:
			t.Fatalf("%q parsed as %q", s, p)
		}
	})
}
