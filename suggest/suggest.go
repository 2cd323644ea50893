// Package suggest finds the names nearest to a misspelt one, for the "did
// you mean" part of error messages: unknown models, GPUs, commands,
// allocator options, spec layer types and fields.
package suggest

import (
	"sort"
	"strings"
)

// Normalize folds case and drops the separators people use
// interchangeably in names: "-", "_", "." and "/".
func Normalize(s string) string {
	return strings.NewReplacer("-", "", "_", "", ".", "", "/", "").Replace(strings.ToLower(s))
}

// maxLen bounds the work on hostile input: distances are quadratic.
const maxLen = 64

// Nearest returns up to n candidates within a plausible misspelling of s,
// nearest first (ties in the candidates' order). A candidate that begins
// with s, or that s begins with, counts as one edit away.
func Nearest(s string, candidates []string, n int) []string {
	ns := Normalize(s)
	if len(ns) > maxLen || n <= 0 {
		return nil
	}
	type scored struct {
		name string
		d    int
	}
	var sc []scored
	seen := map[string]bool{}
	for _, c := range candidates {
		if seen[c] {
			continue
		}
		seen[c] = true
		nc := Normalize(c)
		if len(nc) > maxLen {
			continue
		}
		d := Distance(ns, nc)
		if len(ns) >= 3 && (strings.HasPrefix(nc, ns) || strings.HasPrefix(ns, nc)) {
			d = min(d, 1)
		}
		if d <= max(1, len(ns)/3) {
			sc = append(sc, scored{c, d})
		}
	}
	sort.SliceStable(sc, func(i, j int) bool { return sc[i].d < sc[j].d })
	var out []string
	for i := 0; i < len(sc) && len(out) < n; i++ {
		out = append(out, sc[i].name)
	}
	return out
}

// Distance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours ("rleu",
// "relu") each cost 1.
func Distance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, rows[i-2][j-2]+1)
			}
			rows[i][j] = d
		}
	}
	return rows[len(a)][len(b)]
}
