package graph

import "testing"

func TestStageRangeEven(t *testing.T) {
	// 10 layers over 4 stages: the first two take one more
	want := [][2]int64{{0, 3}, {3, 6}, {6, 8}, {8, 10}}
	for s, w := range want {
		lo, hi, err := Config{PP: 4, Stage: int64(s)}.StageRange(10)
		if err != nil || lo != w[0] || hi != w[1] {
			t.Errorf("stage %d: [%d, %d) %v, want %v", s, lo, hi, err, w)
		}
	}
}
