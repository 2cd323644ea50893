package graph

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestMulAddSize(t *testing.T) {
	for _, c := range []struct {
		a, b     int64
		mul, add int64
		mulOK    bool
		addOK    bool
	}{
		{3, 4, 12, 7, true, true},
		{0, math.MaxInt64, 0, math.MaxInt64, true, true},
		// 2^62 · 2 = 2^63 is one past int64's largest
		{1 << 62, 2, 0, 1<<62 + 2, false, true},
		{1 << 32, 1 << 31, 0, 1<<32 + 1<<31, false, true},
		{math.MaxInt64, 1, math.MaxInt64, 0, true, false},
		{-1, 5, 0, 0, false, false},
	} {
		if got, ok := MulSize(c.a, c.b); ok != c.mulOK || (ok && got != c.mul) {
			t.Errorf("MulSize(%d, %d) = %d, %v", c.a, c.b, got, ok)
		}
		if got, ok := AddSize(c.a, c.b); ok != c.addOK || (ok && got != c.add) {
			t.Errorf("AddSize(%d, %d) = %d, %v", c.a, c.b, got, ok)
		}
	}
}

func TestCheckedBytes(t *testing.T) {
	for _, c := range []struct {
		s    Shape
		dt   DType
		want int64 // -1: refused
	}{
		{Shape{64, 3, 224, 224}, F32, 64 * 3 * 224 * 224 * 4},
		{Shape{}, F32, 4},
		{Shape{0, 1 << 62}, F32, 0},
		// exactly MaxBytes is allowed; a byte more is not
		{Shape{1 << 54}, F32, MaxBytes},
		{Shape{1<<54 + 1}, F32, -1},
		// the batch: 4611686018427387904 · 3 · 224 · 224 · 4
		// wraps int64 (and is past MaxBytes long before)
		{Shape{4611686018427387904, 3, 224, 224}, F32, -1},
		{Shape{200000000000, 3, 224, 224}, F32, -1},
		{Shape{8, -3}, F32, -1},
	} {
		got, err := CheckedBytes("x", c.s, c.dt)
		if c.want < 0 {
			var se *SizeError
			if !errors.As(err, &se) {
				t.Errorf("%v: got %d, %v; want a SizeError", c.s, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: got %d, %v; want %d", c.s, got, err, c.want)
		}
	}
}

// The builder refuses a tensor beyond MaxBytes where it is made, naming it
// and its shape; the graph refuses tensors that come to more together;
// and a graph of more than MaxOps ops is refused while it is built.
func TestBuilderRefusesSizes(t *testing.T) {
	build := func(batch, width int64, layers int) error {
		b := NewBuilder("m")
		x := b.Input("x", Shape{batch, width}, F32)
		y := b.Target("y", Shape{batch}, I64)
		for i := 0; i < layers; i++ {
			x = b.Linear("fc", x, width, true)
		}
		b.CrossEntropy("loss", x, y)
		_, err := b.Graph()
		return err
	}
	if err := build(8, 16, 2); err != nil {
		t.Fatal(err)
	}
	err := build(1<<40, 1<<20, 1)
	if err == nil || !strings.Contains(err.Error(), "x: shape [1099511627776, 1048576] of float32 is more than the 64 PiB") {
		t.Errorf("a 4 EiB input: %v", err)
	}
	// each activation 2^52 bytes (4 PiB): 16 of them pass one by one and
	// come to 64 PiB with the input, more with the rest
	if err := build(1<<30, 1<<20, 16); err == nil || !strings.Contains(err.Error(), "its tensors come to more than the 64 PiB") {
		t.Errorf("4 PiB tensors, 17 of them: %v", err)
	}
	if err := build(1, 4, MaxOps+1); err == nil || !strings.Contains(err.Error(), "more than 65536 ops") {
		t.Errorf("%d layers: %v", MaxOps+1, err)
	}
}
