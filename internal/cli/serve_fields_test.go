package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"

	"github.com/batchfit/batchfit/job"
)

// A request's fields are read by the job's table: a value not of the
// field's kind or choices, and a field no flag of the command has, are
// refused by name before any command runs.
func TestServeDecodesByTable(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	for _, c := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{"model": "mlp", "optimizer": "adamx"}, 400, `field "optimizer": unknown optimizer "adamx"`},
		{map[string]any{"model": "mlp", "precision": "fp16"}, 400, `field "precision": precision "fp16" is ambiguous`},
		{map[string]any{"model": "mlp", "seq": "long"}, 400, `field "seq": "long" is not an integer`},
		{map[string]any{"model": "mlp", "empty-cache": "maybe"}, 400, `field "empty-cache": "maybe" is not true or false`},
		{map[string]any{"model": "mlp", "cache": "paged"}, 400, `field "cache": "paged": want dynamic or static`},
		{map[string]any{"model": "mlp", "optimiser": "adam"}, 400, `unknown field "optimiser"; did you mean optimizer?`},
		{map[string]any{"model": "mlp", "bs": "8"}, 400, `unknown field "bs"; did you mean batch?`},
		{map[string]any{"model": "mlp", "optimizer": "PagedAdamW8bit", "precision": "bf16"}, 200, `"peak_allocated_bytes"`},
	} {
		res, body := servertest.PostJSON(t, ts.URL+"/api/estimate", c.body)
		if res.StatusCode != c.code || !strings.Contains(errorOf(body), c.want) {
			t.Errorf("%v: %d %s; want %d with %s", c.body, res.StatusCode, body, c.code, c.want)
		}
	}
}

// /api/fields is the table: each job field with its kind, choices,
// default and help, and the fields each command takes.
func TestServeFields(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	res, err := http.Get(ts.URL + "/api/fields")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got struct {
		Fields []struct {
			Name     string            `json:"name"`
			Kind     string            `json:"kind"`
			Choices  []string          `json:"choices"`
			Default  string            `json:"default"`
			Defaults map[string]string `json:"defaults"`
			Help     string            `json:"help"`
			Env      []string          `json:"env"`
		} `json:"fields"`
		Commands map[string][]string `json:"commands"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got.Fields) != len(job.Fields) {
		t.Fatalf("%d fields, the table has %d", len(got.Fields), len(job.Fields))
	}
	byName := map[string]int{}
	for i, f := range got.Fields {
		byName[f.Name] = i
	}
	opt := got.Fields[byName["optimizer"]]
	if opt.Kind != "string" || opt.Default != "adam" || !slices.Equal(opt.Choices[:3], []string{"sgd", "adam", "adamw"}) || !slices.Contains(opt.Choices, "paged_adamw8bit") {
		t.Errorf("optimizer: %+v", opt)
	}
	if f := got.Fields[byName["alloc-conf"]]; !slices.Equal(f.Env, []string{"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
		t.Errorf("alloc-conf: %+v", f)
	}
	if f := got.Fields[byName["batch"]]; f.Defaults["estimate"] != "32" || f.Defaults["sweep"] != "1:256" {
		t.Errorf("batch: %+v", f)
	}
	if f := got.Fields[byName["steps"]]; f.Kind != "int" || f.Default != "3" {
		t.Errorf("steps: %+v", f)
	}
	if f := got.Fields[byName["weight-decay"]]; f.Kind != "float" || f.Default != "" {
		t.Errorf("weight-decay: %+v", f)
	}
	if c := got.Commands["plan"]; !slices.Contains(c, "levers") || !slices.Contains(c, "optimizer") {
		t.Errorf("plan's fields: %v", c)
	}
	if c := got.Commands["oom"]; slices.Contains(c, "solve") {
		t.Errorf("oom takes maxbatch's --solve: %v", c)
	}
}

// An optimizer added to the table's choices is a value the server takes
// and an option of the page (which builds its options from /api/fields).
func TestServeExtraOptimizer(t *testing.T) {
	t.Parallel()
	c := job.DefaultChoices()
	c.Optimizers = append(c.Optimizers, "lion")
	ts := testServer(t, server.Options{Fields: job.NewTable(c)})
	res, err := http.Get(ts.URL + "/api/fields")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(b, []byte(`"paged_adamw","lion"]`)) {
		t.Errorf("/api/fields lacks lion: %s", b)
	}
	// the table lets it through; train, which has no lion, refuses it in
	// the command (422 or 400 from the command, not the field check)
	res2, body := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp", "optimizer": "lion"})
	if strings.Contains(errorOf(body), `field "optimizer"`) {
		t.Errorf("the server refused lion by its table: %d %s", res2.StatusCode, body)
	}
	res3, body := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp", "optimizer": "lamb"})
	if res3.StatusCode != 400 || !strings.Contains(errorOf(body), `field "optimizer"`) {
		t.Errorf("lamb: %d %s", res3.StatusCode, body)
	}
}

// errorOf is an error answer's message, or the body itself.
func errorOf(body []byte) string {
	var e server.APIError
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(body)
}
