package cli

import "testing"

// The same answer ends with the same exit status whatever the output mode
// (the README: 0 ok, 1 failure, "does not fit at batch 1" included, 2
// usage): JSON and CSV print the answer and then fail as the text does.
func TestExitStatusSameInEveryMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args  []string
		want  int
		modes [][]string
	}{
		// 70B parameters in float32 are 280 GB: not at batch 1 on a 15 GB T4
		{[]string{"estimate", "Llama-3-70B", "--batch", "1", "--gpu", "t4"}, 1, nil},
		{[]string{"estimate", "mlp", "--batch", "32", "--gpu", "t4"}, 0, nil},
		{[]string{"maxbatch", "Llama-3-70B", "--gpu", "t4"}, 1, nil},
		{[]string{"maxbatch", "mlp", "--gpu", "t4", "--batch", "1"}, 0, nil},
		{[]string{"plan", "Llama-3-70B", "--gpu", "t4"}, 1, nil},
		{[]string{"sweep", "Llama-3-70B", "--batch", "1:2", "--gpu", "t4"}, 1, [][]string{{"--csv"}}},
		{[]string{"sweep", "mlp", "--batch", "1:4", "--gpu", "t4"}, 0, [][]string{{"--csv"}}},
		{[]string{"oom", "no message here"}, 1, nil},
		{[]string{"snapshot", "testdata/no-such.pickle"}, 1, nil},
		{[]string{"validate", "testdata/no-such.json"}, 1, nil},
		{[]string{"estimate", "mlp", "--batch", "0"}, 2, nil},
		{[]string{"gpus"}, 0, nil},
	}
	for _, c := range cases {
		modes := append([][]string{nil, {"--json"}}, c.modes...)
		for _, m := range modes {
			args := append(append([]string{}, c.args...), m...)
			_, errs, code := run(args...)
			if code != c.want {
				t.Errorf("%v: exit %d, want %d (%s)", args, code, c.want, errs)
			}
		}
	}
}
