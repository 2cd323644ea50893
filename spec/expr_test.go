package spec

import (
	"strings"
	"testing"
)

func TestExpr(t *testing.T) {
	env := map[string]int64{"hidden": 1024, "layers": 4, "h": 7, "neg": -7}
	for _, tc := range []struct {
		src  string
		want int64
		err  string
	}{
		{"784", 784, ""},
		{"1_000", 1000, ""},
		{"$hidden", 1024, ""},
		{"hidden", 1024, ""},
		{"$layers - 1", 3, ""},
		{"4 * $hidden", 4096, ""},
		{"2 + 3 * 4", 14, ""},
		{"(2 + 3) * 4", 20, ""},
		{"2 - 3 - 4", -5, ""},
		{"-$h", -7, ""},
		{"- -3", 3, ""},
		{"+3", 3, ""},
		{"$hidden / 4", 256, ""},
		{"$h // 2", 3, ""},
		{"$neg // 2", -4, ""}, // floors, as Python does
		{"$h / 2", 0, "7 / 2 is not a whole number"},
		{"$h // 0", 0, "division by zero"},
		{"9223372036854775807 + 1", 0, "integer overflow"},
		{"-9223372036854775807 - 2", 0, "integer overflow"},
		{"4611686018427387904 * 2", 0, "integer overflow"},
		{"$nope", 0, `symbol "nope" has no value`},
		{"", 0, "incomplete expression"},
		{"2 +", 0, "incomplete expression"},
		{"(2 + 3", 0, "missing ')'"},
		{"2 3", 0, `unexpected "3"`},
		{"$", 0, `bad symbol "$"`},
		{"$1", 0, `bad symbol "$1"`},
		{"2 ^ 3", 0, `unexpected "^"`},
		{"99999999999999999999", 0, "bad integer"},
		{"1__", 0, "bad integer"},
		{strings.Repeat("(", 300), 0, "longer than 256"},
	} {
		e, err := parseExpr(tc.src)
		var got int64
		if err == nil {
			got, err = e.eval(env)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.src, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %d, %v; want %d", tc.src, got, err, tc.want)
		}
	}
	e, _ := parseExpr("2 * ($a + b) // 3")
	if got := e.String(); got != "((2 * ($a + $b)) // 3)" {
		t.Errorf("String() = %q", got)
	}
	if e.constant() {
		t.Error("constant with symbols")
	}
}

func TestNearest(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want string
	}{
		{"linaer", "linear"},
		{"Conv2D", "conv2d"},
		{"batchnorm", "batchnorm2d batchnorm1d"},
		{"maxpool", "maxpool2d"},
		{"relu6", "relu"},
		{"xyzzy", ""},
	} {
		got := strings.Join(nearest(tc.s, typeNames(), 3), " ")
		if got != tc.want {
			t.Errorf("nearest(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}
