package cli

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/server"
)

// syncBuffer is a log written by the server's handlers and read by the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// quickClient gives up on an answer after two seconds: a server that
// holds a request longer has failed the test.
var quickClient = &http.Client{Timeout: 2 * time.Second}

// quickEstimate posts a small estimate and fails the test unless it is
// answered 200 within a second.
func quickEstimate(t *testing.T, url string) {
	t.Helper()
	start := time.Now()
	res, err := quickClient.Post(url+"/api/estimate", "application/json", strings.NewReader(`{"model":"mlp","gpu":"t4"}`))
	if err != nil {
		t.Fatalf("a small estimate: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || time.Since(start) > time.Second {
		t.Fatalf("a small estimate: %d after %s, want 200 within a second", res.StatusCode, time.Since(start).Round(time.Millisecond))
	}
}

// Reading an upload stops at --timeout: a multipart body that stops
// arriving after its first part (within the body rate's 5s of grace) is
// answered 503 at the timeout, not held until the client gives up.
func TestServeReadStopsAtTimeout(t *testing.T) {
	ts := testServer(t, server.Options{Timeout: 300 * time.Millisecond})
	addr := ts.Listener.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /api/estimate HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n"+
		"--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nmlp\r\n--x\r\nContent-Disposition: form-data; name=\"model_file\"; filename=\"m.yaml\"\r\n\r\nla", addr)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 3s: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 503 || !strings.Contains(string(body), "--timeout") || time.Since(start) > 1300*time.Millisecond {
		t.Errorf("%d %s after %s, want 503 naming --timeout within a second of the 300ms", res.StatusCode, body, time.Since(start).Round(time.Millisecond))
	}
}

// Stopping the server (its base context, which SIGTERM ends) stops the
// work under way: the request in flight and those after it are answered
// 503 at once.
func TestServeStopAnswers503(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	base, stop := context.WithCancel(context.Background())
	defer stop()
	ts := testServer(t, server.Options{Base: base})
	type answer struct {
		code int
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := quickClient.Post(ts.URL+"/api/plan", "application/json", strings.NewReader(slowPlan))
		if err != nil {
			got <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got <- answer{code: res.StatusCode, body: string(b)}
	}()
	time.Sleep(300 * time.Millisecond)
	stopped := time.Now()
	stop()
	a := <-got
	if a.err != nil || a.code != 503 || !strings.Contains(a.body, "stopping") || time.Since(stopped) > time.Second {
		t.Errorf("the request in flight: %d %s %v after %s, want 503 saying the server is stopping within a second", a.code, a.body, a.err, time.Since(stopped).Round(time.Millisecond))
	}
	res, b := postJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp"})
	if res.StatusCode != 503 || !strings.Contains(string(b), "stopping") {
		t.Errorf("a request after the stop: %d %s, want 503", res.StatusCode, b)
	}
}

// A gzip-compressed snapshot (the corpus's .pickle.gz, which the command
// line reads) is answered as the same snapshot uncompressed; two parts of
// one field are refused, naming it.
func TestServeSnapshotUploads(t *testing.T) {
	ts := testServer(t, server.Options{})
	raw := snapshotFixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	res, want := postForm(t, ts.URL+"/api/snapshot", part{field: "snapshot", file: "snap.pickle", data: raw})
	if res.StatusCode != 200 {
		t.Fatalf("the snapshot uncompressed: %d %s", res.StatusCode, want)
	}
	res, got := postForm(t, ts.URL+"/api/snapshot", part{field: "snapshot", file: "snap.pickle", data: gz.Bytes()})
	if res.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("the snapshot gzip-compressed: %d\n%.500s\nwant\n%.500s", res.StatusCode, got, want)
	}
	for _, c := range []struct {
		name  string
		parts []part
		field string
	}{
		{"two snapshots", []part{{field: "snapshot", file: "a.pickle", data: raw}, {field: "snapshot", file: "b.pickle", data: raw}}, "snapshot"},
		{"two model files", []part{{field: "snapshot", file: "a.pickle", data: raw}, {field: "model_file", file: "a.yaml", data: []byte("x")}, {field: "model_file", file: "b.yaml", data: []byte("x")}}, "model_file"},
		{"a field twice", []part{{field: "snapshot", file: "a.pickle", data: raw}, {field: "alloc-conf", value: "expandable_segments:True"}, {field: "alloc-conf", value: "expandable_segments:False"}}, "alloc-conf"},
	} {
		res, body := postForm(t, ts.URL+"/api/snapshot", c.parts...)
		var e server.APIError
		if res.StatusCode != 400 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, `"`+c.field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.name, res.StatusCode, body, c.field)
		}
	}
}

// maxbatch's search stops at the server's bound of --limit (2^20), not the
// search's own (solve.DefaultLimit, 2^24): the MLP fits far past 2^20 on a
// 2 TiB GPU (the command line finds 16777216), so the answer is the bound,
// marked limited.
func TestServeMaxbatchBound(t *testing.T) {
	ts := testServer(t, server.Options{})
	res, b := postJSON(t, ts.URL+"/api/maxbatch", map[string]any{"model": "mlp", "gpu": "2TiB"})
	var ans struct {
		Max     int64 `json:"max_batch"`
		Limited bool  `json:"limited"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &ans) != nil {
		t.Fatalf("%d %.300s", res.StatusCode, b)
	}
	if ans.Max != 1<<20 || !ans.Limited {
		t.Errorf("max_batch %d limited %v, want %d limited", ans.Max, ans.Limited, 1<<20)
	}
}
