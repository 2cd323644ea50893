package job

import "testing"

// The mode and generation flags never panic, whatever their values.
func FuzzInferenceFlags(f *testing.F) {
	f.Add("generate", "static", int64(8), int64(4), int64(2), int64(0))
	f.Add("eval", "dynamic", int64(0), int64(0), int64(1), int64(16))
	f.Add("gen", "", int64(-1), int64(-5), int64(0), int64(-3))
	f.Fuzz(func(t *testing.T, mode, cache string, prompt, tokens, beams, seq int64) {
		j := Job{Mode: mode, Cache: cache, Prompt: prompt, NewTokens: tokens, Beams: beams, Seq: seq, Accumulate: 1}
		in, err := j.inference(true)
		if err != nil && !IsUsage(err) {
			t.Errorf("%v: not a usage error", err)
		}
		if err == nil && in != nil && in.Mode == "generate" && (in.NewTokens <= 0 || in.Beams < 1) {
			t.Errorf("accepted %+v", in)
		}
	})
}
