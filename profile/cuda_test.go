package profile

import "testing"

// Lazy module loading starts with the CUDA 11.7 runtime: 11.6 and
// earlier load every kernel at start-up, 11.7, 11.8 and 12.x do not.
func TestEagerModuleLoading(t *testing.T) {
	for _, c := range []struct {
		in    string
		eager bool
		bad   bool
	}{
		{"10.2", true, false},
		{"11.3", true, false},
		{"11.6", true, false},
		{"11.7", false, false},
		{"11.8", false, false},
		{" 12.1 ", false, false},
		{"12.4.1", false, false},
		{"11", false, true},
		{"eleven.3", false, true},
		{"11.x", false, true},
		{"-1.0", false, true},
		{"", false, true},
	} {
		got, err := EagerModuleLoading(c.in)
		if (err != nil) != c.bad || (err == nil && got != c.eager) {
			t.Errorf("EagerModuleLoading(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.eager, c.bad)
		}
	}
}
