package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// notesIn decodes the notes of an estimate's JSON.
func notesIn(t *testing.T, out string) []report.NoteJSON {
	t.Helper()
	var e struct {
		Notes []report.NoteJSON `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return e.Notes
}

func hasNote(ns []report.NoteJSON, code, text string) bool {
	for _, n := range ns {
		if n.Code == code && strings.Contains(n.Text, text) {
			return true
		}
	}
	return false
}

// The notes are the same in the text and the JSON: gpt2 (heads of 64) in
// bf16-mixed on an h100 (9.0) takes cuDNN attention, the first that
// sdp_utils.cpp tries there under 2.11 (priority_order), whose checks
// (float16 or bfloat16, sm80+, a head dimension that is a multiple of 8 up
// to 128) all pass; in 32-true cuDNN attention and flash are out (float32)
// and memory-efficient, next, takes float32.
func TestNotesTextAndJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		precision string
		code      string
		text      string
	}{
		{"bf16-mixed", "attention-kernel", "picks the cuDNN attention kernel here;"},
		{"32-true", "attention-kernel", "picks the efficient kernel here (cuDNN attention and flash take float16 and bfloat16 only"},
	}
	for _, c := range cases {
		t.Run(c.precision, func(t *testing.T) {
			args := []string{"estimate", "gpt2", "--batch", "1", "--seq", "64", "--gpu", "h100-80gb", "--precision", c.precision}
			out, errs, code := run(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !strings.Contains(out, "\nnote: attention: ") || !strings.Contains(out, c.text) {
				t.Errorf("text lacks the note %q:\n%s", c.text, out)
			}
			out, errs, code = run(append(args, "--json")...)
			if code != 0 {
				t.Fatalf("--json: exit %d: %s", code, errs)
			}
			if ns := notesIn(t, out); !hasNote(ns, c.code, c.text) {
				t.Errorf("JSON notes %+v lack %s %q", ns, c.code, c.text)
			}
		})
	}
}

// A job with no caveat has an empty list of notes, not a missing one:
// the mlp (Linear and ReLU, no convolution, no attention) in 32-true on
// an a100.
func TestNotesEmptyJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "mlp", "--batch", "4", "--gpu", "a100-40gb", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, `"notes": []`) {
		t.Errorf("want \"notes\": [] in\n%s", out)
	}
}

// maxbatch's and sweep's JSON carry their results' notes: the mlp in
// bf16-mixed on a T4 (7.5, no bfloat16 tensor cores).
func TestNotesSearchJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("maxbatch", "mlp", "--gpu", "t4", "--precision", "bf16-mixed", "--json")
	if code != 0 {
		t.Fatalf("maxbatch: exit %d: %s", code, errs)
	}
	var mb struct {
		AtMax struct {
			Notes []report.NoteJSON `json:"notes"`
		} `json:"at_max"`
	}
	if err := json.Unmarshal([]byte(out), &mb); err != nil {
		t.Fatal(err)
	}
	if !hasNote(mb.AtMax.Notes, "bf16-no-tensor-cores", "compute capability 7.5") {
		t.Errorf("maxbatch at_max notes %+v", mb.AtMax.Notes)
	}
	out, errs, code = run("sweep", "mlp", "--batch", "1:4", "--gpu", "t4", "--precision", "bf16-mixed", "--json")
	if code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, errs)
	}
	var sw []struct {
		Notes []report.NoteJSON `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &sw); err != nil {
		t.Fatal(err)
	}
	if len(sw) == 0 {
		t.Fatal("sweep: no points")
	}
	for i, p := range sw {
		if !hasNote(p.Notes, "bf16-no-tensor-cores", "compute capability 7.5") {
			t.Errorf("sweep point %d notes %+v", i, p.Notes)
		}
	}
}

// A Hugging Face config's own notes reach every output: a phi3 config
// with partial_rotary_factor 0.5, which the llama-family graph does not
// model (it rotates whole heads), says so in the text and in the JSON.
func TestHFConfigNotes(t *testing.T) {
	t.Parallel()
	cfg := map[string]any{
		"architectures": []any{"Phi3ForCausalLM"}, "model_type": "phi3",
		"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
		"rms_norm_eps": 1e-5, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
		"partial_rotary_factor": 0.5,
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"estimate", path, "--batch", "1", "--seq", "32", "--gpu", "a100-40gb"}
	out, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	const want = "partial_rotary_factor 0.5: the llama-family graph rotates whole heads"
	if !strings.Contains(out, "\nnote: "+want) {
		t.Errorf("text lacks %q:\n%s", want, out)
	}
	out, errs, code = run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errs)
	}
	if ns := notesIn(t, out); !hasNote(ns, "partial-rotary-factor", want) {
		t.Errorf("JSON notes %+v lack partial-rotary-factor", ns)
	}
}

// --attention where PyTorch's dispatcher would refuse the kernel is a
// usage error (exit 2) that says why.
func TestAttentionUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "resnet50", "--attention", "flash"}, "resnet50 has none"},
		{[]string{"estimate", "gpt2", "--attention", "flash", "--gpu", "t4", "--precision", "16-mixed"}, "compute capability 8.0 or higher"},
		{[]string{"estimate", "gpt2", "--attention", "flash", "--gpu", "h100-80gb"}, "float16 or bfloat16 inputs only"},
		{[]string{"maxbatch", "resnet50", "--attention", "efficient", "--gpu", "t4"}, "resnet50 has none"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, errs, code := run(c.args...)
			if code != 2 || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, %q; want 2 and %q", code, errs, c.want)
			}
		})
	}
}

// estimate's suggestions and plan say the same of bf16-true, from the
// change's own description (plan.NumericsWarning): gpt2 at seq 1024,
// batch 32 in 32-true does not fit an a10g's 24 GB, and one of the three
// smallest changes moves to bf16-true.
func TestBF16TrueSuggestionWarns(t *testing.T) {
	t.Parallel()
	args := []string{"estimate", "gpt2", "--seq", "1024", "--batch", "32", "--gpu", "a10g"}
	out, _, _ := run(args...)
	const want = "precision 32-true → bf16-true — changes the numerics: the weights themselves are kept in 16 bits, with no float32 master copy"
	if !strings.Contains(out, want) {
		t.Errorf("text suggestions lack %q:\n%s", want, out)
	}
	out, _, _ = run(append(args, "--json")...)
	var e struct {
		Suggestions []struct {
			Precision string   `json:"precision"`
			Changes   []string `json:"changes"`
		} `json:"suggestions"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, s := range e.Suggestions {
		if s.Precision != "bf16-true" {
			continue
		}
		seen = true
		if !strings.Contains(strings.Join(s.Changes, "; "), want) {
			t.Errorf("JSON suggestion's changes %q lack the warning", s.Changes)
		}
	}
	if !seen {
		t.Errorf("no bf16-true suggestion in %s", out)
	}
}

// maxbatch's and sweep's text print their results' notes as estimate
// does, a sweep each kind once however many batches have it: the mlp in
// bf16-mixed on a T4, whose bfloat16 note holds at every batch.
func TestNotesSearchText(t *testing.T) {
	t.Parallel()
	const want = "note: bf16-mixed on t4: compute capability 7.5 has no bfloat16 tensor cores"
	for _, args := range [][]string{
		{"maxbatch", "mlp", "--gpu", "t4", "--precision", "bf16-mixed"},
		{"sweep", "mlp", "--batch", "1:4", "--gpu", "t4", "--precision", "bf16-mixed"},
	} {
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", args[0], code, errs)
		}
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%s: the bf16 note %d times, want once:\n%s", args[0], n, out)
		}
	}
}

// A job that names flash attention is planned only in the precisions
// flash takes (float16 and bfloat16, sdp_utils check_tensor_dtype): the
// planner's suggestions do not fail on a 32-true candidate. gpt2 at batch
// 64, seq 1024 in bf16-mixed runs out of memory on an a10g.
func TestFlashSuggestionsKeep16Bits(t *testing.T) {
	t.Parallel()
	out, errs, _ := run("estimate", "gpt2", "--attention", "flash", "--precision", "bf16-mixed", "--batch", "64", "--seq", "1024", "--gpu", "a10g")
	if strings.Contains(out, "no suggestions") || !strings.Contains(out, "make it fit") {
		t.Errorf("want suggestions:\n%s%s", out, errs)
	}
	if strings.Contains(out, "→ 32-true") {
		t.Errorf("a suggestion moves flash attention to 32-true:\n%s", out)
	}
}
