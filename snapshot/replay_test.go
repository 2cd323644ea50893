package snapshot

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/batchfit/batchfit/alloc"
)

// replayed is a recording replayed from its rebuilt starting state, beside
// what the recording itself says.
type replayed struct {
	conv                                   *Conversion
	tl                                     *alloc.Timeline
	recSegAllocs                           int
	recStart, recPeak, recEnd, dumpReserve int64
}

func (r replayed) String() string {
	return fmt.Sprintf("segments allocated recorded %d replayed %d; reserved start %d, peak recorded %d replayed %d, end recorded %d (snapshot %d) replayed %d",
		r.recSegAllocs, r.tl.Final.NumDeviceAlloc, r.recStart, r.recPeak, r.tl.PeakReserved, r.recEnd, r.dumpReserve, r.tl.Final.Reserved)
}

func replayFromState(t *testing.T, s *Snapshot, device int) replayed {
	t.Helper()
	cfg, err := alloc.ParseConfig(s.AllocatorSettings.AllocConf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.ConvertFromState(device, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := alloc.Replay(c.Trace, cfg, alloc.Device{}, alloc.ReplayOptions{Initial: c.Initial})
	if err != nil {
		t.Fatal(err)
	}
	r := replayed{conv: c, tl: tl}
	for _, e := range c.Segments {
		if e.Action == ActionSegmentAlloc || e.Action == ActionSegmentMap {
			r.recSegAllocs++
		}
	}
	r.recStart, r.recPeak, r.recEnd = c.RecordedReserved()
	for _, g := range s.Segments {
		if g.Device == device {
			r.dumpReserve += g.TotalSize
		}
	}
	return r
}

// within reports whether got is within frac of want.
func within(got, want int64, frac float64) bool {
	return math.Abs(float64(got-want)) <= frac*math.Abs(float64(want))
}

// TestReplayRecordedCorpus replays every committed GPU recording from the
// state rebuilt at its first entry: the replay must create as many
// segments as PyTorch did, and reserve what it reserved at its peak and at
// the end within 0.5 %.
func TestReplayRecordedCorpus(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "gpu", "recordings", "*"))
	if len(files) == 0 {
		t.Skip("no recordings under testdata/gpu/recordings")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := ReadFile(f, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for d := range max(len(s.Traces), 1) {
				if d < len(s.Traces) && len(s.Traces[d]) == 0 {
					continue
				}
				r := replayFromState(t, s, d)
				t.Logf("device %d: %v", d, r)
				if r.recEnd != r.dumpReserve {
					t.Errorf("device %d: the recorded segment events end at %d bytes reserved, the snapshot's segments hold %d", d, r.recEnd, r.dumpReserve)
				}
				if int64(r.recSegAllocs) != r.tl.Final.NumDeviceAlloc {
					t.Errorf("device %d: %d segments allocated, recorded %d", d, r.tl.Final.NumDeviceAlloc, r.recSegAllocs)
				}
				if !within(r.tl.Final.Reserved, r.dumpReserve, 0.005) {
					t.Errorf("device %d: reserved at the end %d, recorded %d", d, r.tl.Final.Reserved, r.dumpReserve)
				}
				if !within(r.tl.PeakReserved, r.recPeak, 0.005) {
					t.Errorf("device %d: peak reserved %d, recorded %d", d, r.tl.PeakReserved, r.recPeak)
				}
			}
		})
	}
}
