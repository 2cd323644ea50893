package gpu

import (
	"math"
	"strings"
	"testing"
)

var gib = float64(1 << 30)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"80GB", 80 << 30, false}, {"80GiB", 80 << 30, false}, {"81559MiB", 81559 << 20, false},
		{"1.5 GiB", 3 << 29, false}, {"512", 512, false}, {"20 MB", 20 << 20, false},
		{"", 0, true}, {"GB", 0, true}, {"12 parsecs", 0, true}, {"1e30GB", 0, true}, {"99999999999TB", 0, true},
		// 1e3 MiB = 1000·2^20; 2.5e-1 GiB = 2^28.
		{"1e3MiB", 1000 << 20, false}, {"2.5e-1GiB", 1 << 28, false}, {"1.2.3GB", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

// Refusals say what went wrong: an overflow is "too large", never an
// unknown unit, and an unknown unit lists every unit that is accepted.
func TestParseSizeMessages(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1e20GB", "too large"},   // 1e20 · 2^30 > 2^60
		{"1E+19TB", "too large"},  // 1e19 · 2^40 > 2^60
		{"1e999GB", "too large"},  // past float64 itself
		{"2048PiB", "GB, GiB"},    // PiB is not a unit; GB is listed
		{"12 parsecs", "KB, KiB"}, // every accepted spelling is named
		{"1.2.3GB", `"1.2.3" is not a number`},
		{"-5GB", "non-negative number"},
	} {
		_, err := ParseSize(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSize(%q): %v, want %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "strconv") {
			t.Errorf("ParseSize(%q): %v leaks strconv", c.in, err)
		}
	}
}

func TestLookup(t *testing.T) {
	g, err := Lookup("h100-80gb")
	// nvidia-smi's memory.total on an H100 80GB HBM3 is 81559 MiB; PyTorch
	// printed "total capacity of 79.11 GiB", whose least value is 79.105 GiB.
	if err != nil || g.SMITotal != 81559<<20 || g.Capacity != int64(79.105*gib) || g.Major != 9 || g.CapacityDerived {
		t.Errorf("h100-80gb: %+v, %v", g, err)
	}
	if g, err := Lookup("NVIDIA A100-SXM4-40GB"); err != nil || g.Name != "a100-40gb" {
		t.Errorf("by device name: %+v, %v", g, err)
	}
	if _, err := Lookup("h10O-80gb"); err == nil || !strings.Contains(err.Error(), `"h100-80gb"`) {
		t.Errorf("misspelt: %v", err)
	}
	for _, g := range All() {
		if g.ContextSize <= 0 || g.Capacity <= g.ContextSize {
			t.Errorf("%s: capacity %d, context %d", g.Name, g.Capacity, g.ContextSize)
		}
		// What PyTorch can use is never more than nvidia-smi's total, and
		// the driver keeps at least some of it.
		if g.Capacity >= g.SMITotal || g.CapacityFrom == "" {
			t.Errorf("%s: capacity %d of nvidia-smi's %d (%q)", g.Name, g.Capacity, g.SMITotal, g.CapacityFrom)
		}
		if g.CapacityDerived != strings.HasPrefix(g.CapacityFrom, "derived") {
			t.Errorf("%s: derived %v but %q", g.Name, g.CapacityDerived, g.CapacityFrom)
		}
	}
}

func TestReportedCapacity(t *testing.T) {
	// PyTorch prints format_size with two decimals: "14.56 GiB" covers
	// [14.555, 14.565) GiB, and the catalog takes the lower end.
	if got, want := fromPrinted(14.56), int64(14.555*gib); got != want {
		t.Errorf("fromPrinted(14.56) = %d, want %d", got, want)
	}
	for name := range reportedCapacity {
		if _, err := Lookup(name); err != nil {
			t.Errorf("reported capacity for %q, which the catalog lacks", name)
		}
	}
	// A GPU without a message gets the smallest share of its family: the
	// L4 (ada) takes the RTX 4090's 23.515 GiB of 24564 MiB, the family's
	// smaller share than the L40S's 44.415 GiB of 46068 MiB.
	l4, _ := Lookup("l4")
	share := 23.515 * 1024 / 24564
	if want := int64(float64(23034<<20)*share) >> 20 << 20; !l4.CapacityDerived || l4.Capacity != want {
		t.Errorf("l4: capacity %d (derived %v), want %d", l4.Capacity, l4.CapacityDerived, want)
	}
}

func TestLookupSize(t *testing.T) {
	cases := []struct {
		name, like string
		err        string
		timed      bool
		share      float64 // of the size, what PyTorch can use
	}{
		// a bare size has no speed, and the smallest measured share
		// (the T4's 14.555 GiB of 15360 MiB)
		{name: "24GB", share: 14.555 * 1024 / 15360},
		{name: "24GB", like: "rtx-4090", timed: true, share: 23.515 * 1024 / 24564},
		{name: "80", err: "at least 1 GiB"},
		{name: "512MiB", err: "at least 1 GiB"},
		{name: "24GB", like: "rtx-409", err: "did you mean"},
		{name: "h100-80gb", like: "a100-80gb", err: "--like applies to a size"},
		{name: "12 parsecs", err: "unknown unit"},
	}
	for _, c := range cases {
		g, err := LookupLike(c.name, c.like)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s like %q: error %v, want one with %q", c.name, c.like, err, c.err)
			}
			continue
		}
		want := int64(float64(24<<30)*c.share) >> 20 << 20
		if err != nil || g.Rates.Known() != c.timed || g.Capacity != want || g.SMITotal != 24<<30 || !g.CapacityDerived {
			t.Errorf("%s like %q: %+v, %v; want capacity %d, timed %v", c.name, c.like, g, err, want, c.timed)
		}
	}
	// Without --like, the context is the catalog's largest, not a Hopper's.
	g, _ := Lookup("24GB")
	if g.ContextSize != contextByFamily["blackwell"] {
		t.Errorf("24GB: context %d, want the largest %d", g.ContextSize, contextByFamily["blackwell"])
	}
}

// LookupLike never panics; whatever it accepts is a catalog GPU or a size
// of at least 1 GiB of which PyTorch gets less than nvidia-smi's total.
func FuzzLookupLike(f *testing.F) {
	for _, s := range [][2]string{{"24GB", ""}, {"24GB", "l4"}, {"80", ""}, {"h100-80gb", ""}, {"1e3TiB", "t4"}, {"0.99GiB", ""}, {"t4", "l4"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, like string) {
		g, err := LookupLike(name, like)
		if err != nil {
			return
		}
		custom := strings.HasPrefix(g.Marketing, "custom ")
		if g.Capacity <= 0 || g.Capacity >= g.SMITotal || (custom && g.SMITotal < MinCustom) {
			t.Errorf("%q like %q: capacity %d of %d", name, like, g.Capacity, g.SMITotal)
		}
	})
}

// Every datasheet tensor peak is the whitepapers' SMs × boost clock × the
// architecture's dense FP16 operations per SM per clock (with FP32
// accumulation): 512 on GeForce Ampere and Ada (half rate), 1024 on Volta,
// Turing, GA10x and AD10x data-centre parts, 2048 on GA100 and 4096 on
// Hopper — so the SM counts and clocks the step-time model quantizes over
// are the ones the peaks were computed from. B200 has no published clock.
func TestCatalogPeaksFollowSMs(t *testing.T) {
	for _, g := range All() {
		r := g.Rates
		if r.SMs <= 0 {
			t.Errorf("%s: no SM count", g.Name)
			continue
		}
		if r.Achievable.Matmul <= 0 || r.Achievable.Matmul > 1 || r.Achievable.Bandwidth <= 0 || r.Achievable.Bandwidth > 1 || r.Achievable.Source == "" || r.SMSource == "" {
			t.Errorf("%s: achievable shares %+v", g.Name, r.Achievable)
		}
		if r.BoostMHz == 0 {
			continue
		}
		per := r.FP16 / (float64(r.SMs) * r.BoostMHz * 1e6)
		ok := false
		for _, want := range []float64{512, 1024, 2048, 4096} {
			if math.Abs(per-want) < 0.01*want {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: FP16 %.4g FLOP/s over %d SMs at %g MHz is %.0f per SM per clock", g.Name, r.FP16, r.SMs, r.BoostMHz, per)
		}
	}
}

// A bare number that a catalog GPU's name carries is that card, said so,
// not a 3,090-byte GPU; a small number no card carries keeps the unit hint.
func TestLookupCardNumber(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"3090", `did you mean rtx-3090?`},
		{"4090", `did you mean rtx-4090?`},
		{"12", `write the unit`},
	} {
		_, err := Lookup(c.name)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Lookup(%q) = %v, want …%s…", c.name, err, c.want)
		}
	}
}

// maxThreadsPerMultiProcessor by compute capability, from the CUDA C++
// Programming Guide's table of technical specifications.
func TestMaxThreadsPerSM(t *testing.T) {
	for _, c := range []struct {
		name string
		want int
	}{{"h200", 2048}, {"a100-80gb", 2048}, {"v100-16gb", 2048}, {"t4", 1024}, {"a10g", 1536}, {"rtx-4090", 1536}, {"l40s", 1536}} {
		g, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.MaxThreadsPerSM(); got != c.want {
			t.Errorf("%s (%d.%d): %d threads per SM, want %d", c.name, g.Major, g.Minor, got, c.want)
		}
	}
}
