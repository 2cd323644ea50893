package smi

import (
	"errors"
	"os"
	"testing"
)

// The fake returns its readings in turn and then the last one again; an
// error it is given comes back from every read.
func TestFake(t *testing.T) {
	a := []GPU{{Index: 0, Used: 1}}
	b := []GPU{{Index: 0, Used: 2}}
	f := &Fake{Frames: [][]GPU{a, b}}
	for i, want := range []int64{1, 2, 2} {
		g, err := f.Read()
		if err != nil || g[0].Used != want {
			t.Errorf("read %d: %v %v", i, g, err)
		}
	}
	f.Err = errors.New("lost")
	if _, err := f.Read(); err == nil {
		t.Error("the error was not returned")
	}
	f.Close()
	if !f.Closed {
		t.Error("not closed")
	}
}

// A process's name is what /proc says; one that does not exist has none.
func TestProcessName(t *testing.T) {
	if _, err := os.Stat("/proc/self/comm"); err != nil {
		t.Skip("no /proc here")
	}
	if processName(os.Getpid()) == "" {
		t.Error("this process has no name")
	}
	if processName(-1) != "" {
		t.Error("a process that cannot exist has a name")
	}
}
