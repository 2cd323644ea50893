package gpu

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"80GB", 80 << 30, false}, {"80GiB", 80 << 30, false}, {"81559MiB", 81559 << 20, false},
		{"1.5 GiB", 3 << 29, false}, {"512", 512, false}, {"20 MB", 20 << 20, false},
		{"", 0, true}, {"GB", 0, true}, {"12 parsecs", 0, true}, {"1e30GB", 0, true}, {"99999999999TB", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestLookup(t *testing.T) {
	g, err := Lookup("h100-80gb")
	// The capacity an H100 80GB HBM3 reports (nvidia-smi memory.total).
	if err != nil || g.Capacity != 81559<<20 || g.Major != 9 {
		t.Errorf("h100-80gb: %+v, %v", g, err)
	}
	if g, err := Lookup("NVIDIA A100-SXM4-40GB"); err != nil || g.Name != "a100-40gb" {
		t.Errorf("by device name: %+v, %v", g, err)
	}
	if g, err := Lookup("24GiB"); err != nil || g.Capacity != 24<<30 {
		t.Errorf("capacity: %+v, %v", g, err)
	}
	if _, err := Lookup("h10O-80gb"); err == nil || !strings.Contains(err.Error(), `"h100-80gb"`) {
		t.Errorf("misspelt: %v", err)
	}
	for _, g := range All() {
		if g.ContextSize <= 0 || g.Capacity <= g.ContextSize {
			t.Errorf("%s: capacity %d, context %d", g.Name, g.Capacity, g.ContextSize)
		}
	}
}
