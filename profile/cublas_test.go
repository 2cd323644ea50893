package profile

import "testing"

// The sizes follow parseChosenWorkspaceSize in
// aten/src/ATen/cuda/CublasHandlePool.cpp: each ":SIZE:COUNT" pair adds
// SIZE × 1024 × COUNT bytes; a value with no pair keeps the default.
func TestParseCublasWorkspaceConfig(t *testing.T) {
	cases := []struct {
		in     string
		want   int64
		ok     bool
		hasErr bool
	}{
		{"", 0, false, false},
		{":4096:8", 4096 * 1024 * 8, true, false},              // 32 MiB, the deterministic-mode setting
		{":16:8", 16 * 1024 * 8, true, false},                  // 128 KiB
		{":4096:2:16:8", 4096*1024*2 + 16*1024*8, true, false}, // the default spelled out: 8519680
		{":4096:8:16", 4096 * 1024 * 8, true, false},           // a trailing ":16" matches nothing
		{"x:0:0", 0, true, false},                              // a pair of zeros is a zero workspace
		{"4096", 0, false, false},                              // no pair: PyTorch warns, keeps the default
		{":99999999999999999999:1", 0, false, true},            // does not fit
		{":1073741824:1073741824", 0, false, true},             // overflows the sum
	}
	for _, c := range cases {
		got, ok, err := ParseCublasWorkspaceConfig(c.in)
		if got != c.want || ok != c.ok || (err != nil) != c.hasErr {
			t.Errorf("ParseCublasWorkspaceConfig(%q) = %d, %v, %v; want %d, %v, error %v", c.in, got, ok, err, c.want, c.ok, c.hasErr)
		}
	}
}

func TestCublasWorkspaceFor(t *testing.T) {
	cur := Default()
	cases := []struct {
		major  int
		config string
		want   int64
	}{
		{9, "", 32 << 20},               // Hopper default: 4096 KiB × 8
		{8, "", 8519680},                // elsewhere: :4096:2:16:8
		{9, ":16:8", 128 << 10},         // the setting wins over the default
		{8, "bogus", 8519680},           // unparsable: the default
		{8, ":4096:8", 4096 * 1024 * 8}, // deterministic algorithms' advice
	}
	for _, c := range cases {
		if got := cur.CublasWorkspaceFor(c.major, c.config); got != c.want {
			t.Errorf("CublasWorkspaceFor(%d, %q) = %d, want %d", c.major, c.config, got, c.want)
		}
	}
}

func FuzzParseCublasWorkspaceConfig(f *testing.F) {
	for _, s := range []string{"", ":4096:8", ":16:8:4096:2", "::", ":1:", ":99999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok, err := ParseCublasWorkspaceConfig(s)
		if n < 0 || n > maxCublasWorkspace {
			t.Fatalf("%q: %d bytes", s, n)
		}
		if err != nil && ok {
			t.Fatalf("%q: ok with an error", s)
		}
	})
}
