package plan

import "testing"

// ParseLevers never panics, and what it accepts are known levers.
func FuzzParseLevers(f *testing.F) {
	for _, s := range []string{"accumulate", "precision,checkpoint", "", ",,", "precisoin", "ACCUMULATE, allocator"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := ParseLevers(s)
		if err != nil {
			return
		}
		for _, l := range ls {
			ok := false
			for _, k := range Levers() {
				ok = ok || k == l
			}
			if !ok {
				t.Errorf("%q: unknown lever %q accepted", s, l)
			}
		}
	})
}
