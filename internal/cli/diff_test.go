package cli

import (
	"fmt"
	"strings"
	"testing"
)

// diffContext is how many unchanged lines a hunk shows around a change,
// as diff -u does.
const diffContext = 3

// diffMaxCells bounds the table the longest common subsequence fills
// (lines of one side × lines of the other, after the common head and
// tail are set aside): beyond it the middle is shown removed and added
// whole, which is still a diff, rather than taking gigabytes.
const diffMaxCells = 4 << 20

// lineDiff is a unified diff of want and got, line by line, with the
// headers naming them; "" when they are equal. A golden file that no
// longer matches then shows the lines that changed, not two whole
// outputs to compare by eye.
func lineDiff(wantName, want, gotName, got string) string {
	if want == got {
		return ""
	}
	a, b := splitLines(want), splitLines(got)
	ops := diffOps(a, b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", wantName, gotName)
	// ops walks both sides at once; a hunk is a run of ops whose changes
	// lie within 2×diffContext unchanged lines of each other
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-diffContext, 0)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(end+diffContext, len(ops))
		var aStart, aN, bStart, bN int
		aStart, bStart = ops[start].a, ops[start].b
		for _, op := range ops[start:end] {
			if op.kind != '+' {
				aN++
			}
			if op.kind != '-' {
				bN++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(aStart, aN), hunkRange(bStart, bN))
		for _, op := range ops[start:end] {
			sb.WriteByte(op.kind)
			sb.WriteString(op.line)
			sb.WriteByte('\n')
		}
		i = end
	}
	return sb.String()
}

// hunkRange is diff -u's "line,count", 1-based; an empty side names the
// line before it.
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s into lines; a missing final newline is shown, as
// diff does, since a golden file differs by it too.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if lines[len(lines)-1] == "" {
		return lines[:len(lines)-1]
	}
	lines[len(lines)-1] += " (no newline at end)"
	return lines
}

// diffOp is one line of the diff: kept (' '), removed from want ('-') or
// added in got ('+'), with its 0-based position on each side.
type diffOp struct {
	kind byte
	line string
	a, b int
}

// diffOps is the edit script from a to b by the longest common
// subsequence of lines, removals before additions where both happen.
func diffOps(a, b []string) []diffOp {
	var ops []diffOp
	// the common head and tail need no table
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		ops = append(ops, diffOp{' ', a[head], head, head})
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	if len(ma)*len(mb) > diffMaxCells {
		for i, l := range ma {
			ops = append(ops, diffOp{'-', l, head + i, head})
		}
		for j, l := range mb {
			ops = append(ops, diffOp{'+', l, head + len(ma), head + j})
		}
	} else {
		// lcs[i][j] is the length of the common subsequence of ma[i:] and mb[j:]
		lcs := make([][]int, len(ma)+1)
		for i := range lcs {
			lcs[i] = make([]int, len(mb)+1)
		}
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				ops = append(ops, diffOp{' ', ma[i], head + i, head + j})
				i++
				j++
			case j == len(mb) || (i < len(ma) && lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, diffOp{'-', ma[i], head + i, head + j})
				i++
			default:
				ops = append(ops, diffOp{'+', mb[j], head + i, head + j})
				j++
			}
		}
	}
	for k := 0; k < tail; k++ {
		ia, ib := len(a)-tail+k, len(b)-tail+k
		ops = append(ops, diffOp{' ', a[ia], ia, ib})
	}
	return ops
}

func TestLineDiff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, want, got, diff string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"one line changed in the middle",
			"1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n",
			"--- w\n+++ g\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		{"a line added at the end",
			"a\nb\n", "a\nb\nc\n",
			"--- w\n+++ g\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"},
		{"a line removed at the start",
			"x\na\nb\n", "a\nb\n",
			"--- w\n+++ g\n@@ -1,3 +1,2 @@\n-x\n a\n b\n"},
		{"everything added",
			"", "a\n",
			"--- w\n+++ g\n@@ -0,0 +1,1 @@\n+a\n"},
		{"missing newline at the end",
			"a\n", "a",
			"--- w\n+++ g\n@@ -1,1 +1,1 @@\n-a\n+a (no newline at end)\n"},
		// changes 10 lines apart are two hunks (more than 2×3 unchanged
		// lines between them); 2 lines apart, one
		{"two hunks",
			"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ntwelve\n",
			"--- w\n+++ g\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+twelve\n"},
		{"one hunk for close changes",
			"1\n2\n3\n4\n", "one\n2\n3\nfour\n",
			"--- w\n+++ g\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n-4\n+four\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := lineDiff("w", c.want, "g", c.got); d != c.diff {
				t.Errorf("got\n%s\nwant\n%s", d, c.diff)
			}
		})
	}
}
