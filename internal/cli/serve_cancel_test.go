package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"

	"github.com/batchfit/batchfit/internal/report"
)

// slowPlan is a plan within the server's bounds that takes minutes to
// answer in full: a 70B model at its longest sequence on 8 GPUs.
const slowPlan = `{"model":"Llama-3-70B","seq":131072,"gpus":8,"strategy":"fsdp","gpu":"h100-80gb","global-batch":1024}`

// Requests whose clients leave stop being computed within a second: the
// client's leaving cancels the request's context, which the planner and
// the simulator check. The test sends a few such requests over the
// loopback, gives up on them, and waits for the server's workers to be
// free; bounded in count (4) and time (a few seconds).
func TestServeAbandonedRequestsStop(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	srv := newServer(server.Options{MaxUpload: 1 << 20, Workers: 2, Loopback: true})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	const n = 4
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/api/plan", strings.NewReader(slowPlan))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				t.Errorf("the plan was answered within half a second (%d %s): the test needs a slower request", res.StatusCode, body)
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Error(err)
			}
		}()
	}
	// every request got a worker or is waiting for one
	time.Sleep(200 * time.Millisecond)
	if got := srv.Active(); got != 2 {
		t.Fatalf("%d requests computing while the clients wait, want 2 (the workers)", got)
	}
	wg.Wait()
	left := time.Now()
	for srv.Active() > 0 {
		if time.Since(left) > time.Second {
			t.Fatalf("%d requests still computing a second after their clients left", srv.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the abandoned requests stopped %s after their clients left", time.Since(left).Round(time.Millisecond))
	// the workers are free: a quick request is answered at once
	start := time.Now()
	res, _ := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp", "gpu": "t4"})
	if res.StatusCode != 200 || time.Since(start) > 5*time.Second {
		t.Errorf("after the abandoned requests: %d in %s", res.StatusCode, time.Since(start))
	}
}

// A request that takes longer than --timeout is stopped and answered 503.
func TestServeTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	ts := testServer(t, server.Options{Timeout: 300 * time.Millisecond})
	start := time.Now()
	var body map[string]any
	json.Unmarshal([]byte(slowPlan), &body)
	res, b := servertest.PostJSON(t, ts.URL+"/api/plan", body)
	took := time.Since(start)
	var e server.APIError
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%d: the error is not JSON: %s", res.StatusCode, b)
	}
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(e.Error, "--timeout") {
		t.Errorf("%d %q, want 503 naming --timeout", res.StatusCode, e.Error)
	}
	if took > 1300*time.Millisecond {
		t.Errorf("answered after %s, want within a second of the 300ms deadline", took)
	}
}

// An error body repeats at most the beginning of the input it refuses: a
// 200 KB field does not come back inside a 400.
func TestServeErrorsClipInput(t *testing.T) {
	ts := testServer(t, server.Options{})
	long := strings.Repeat("x", 200<<10)
	for _, c := range []struct {
		name string
		body map[string]any
		code int
		want string
	}{
		{"a long model name", map[string]any{"model": long}, 400, `unknown model "xxxx`},
		{"a long batch", map[string]any{"model": "mlp", "batch": long}, 400, `batch size "xxxx`},
		{"a long precision", map[string]any{"model": "mlp", "precision": long}, 400, "precision"},
		{"a long freeze list", map[string]any{"model": "mlp", "freeze": long}, 400, "xxxx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, b := servertest.PostJSON(t, ts.URL+"/api/estimate", c.body)
			var e server.APIError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d: the error is not JSON: %.200s", res.StatusCode, b)
			}
			if res.StatusCode != c.code || !strings.Contains(e.Error, c.want) {
				t.Errorf("%d %.300q, want %d and %q", res.StatusCode, e.Error, c.code, c.want)
			}
			if len(b) > 5000 {
				t.Errorf("a %d-byte error body for a %d-byte field", len(b), len(long))
			}
		})
	}
}

func TestClipMessage(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	for _, c := range []struct{ in, want string }{
		{`unknown model "resnet5O"`, `unknown model "resnet5O"`},
		// 64 bytes kept: 32 two-byte characters; 200 bytes between the quotes
		{`unknown model "` + long + `" (see)`, `unknown model "` + strings.Repeat("é", 31) + `…" (200 bytes) (see)`},
		{`a "quoted \" quote"`, `a "quoted \" quote"`},
	} {
		if got := report.ClipMessage(c.in); got != c.want {
			t.Errorf("clipMessage(%.40q…) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := report.ClipMessage(strings.Repeat("y", 10000)); len(got) > report.MaxMessage+32 || !strings.HasSuffix(got, "(5904 bytes cut)") {
		t.Errorf("an unquoted 10000-byte message became %d bytes: …%s", len(got), got[len(got)-30:])
	}
}
