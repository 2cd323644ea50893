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
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"
)

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
		res, err := servertest.QuickClient.Post(ts.URL+"/api/plan", "application/json", strings.NewReader(slowPlan))
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
	res, b := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp"})
	if res.StatusCode != 503 || !strings.Contains(string(b), "stopping") {
		t.Errorf("a request after the stop: %d %s, want 503", res.StatusCode, b)
	}
}

// A gzip-compressed snapshot (the corpus's .pickle.gz, which the command
// line reads) is answered as the same snapshot uncompressed; two parts of
// one field are refused, naming it.
func TestServeSnapshotUploads(t *testing.T) {
	ts := testServer(t, server.Options{})
	raw := servertest.SnapshotFixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	res, want := servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "snapshot", File: "snap.pickle", Data: raw})
	if res.StatusCode != 200 {
		t.Fatalf("the snapshot uncompressed: %d %s", res.StatusCode, want)
	}
	res, got := servertest.PostForm(t, ts.URL+"/api/snapshot", servertest.Part{Field: "snapshot", File: "snap.pickle", Data: gz.Bytes()})
	if res.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("the snapshot gzip-compressed: %d\n%.500s\nwant\n%.500s", res.StatusCode, got, want)
	}
	for _, c := range []struct {
		name  string
		parts []servertest.Part
		field string
	}{
		{"two snapshots", []servertest.Part{{Field: "snapshot", File: "a.pickle", Data: raw}, {Field: "snapshot", File: "b.pickle", Data: raw}}, "snapshot"},
		{"two model files", []servertest.Part{{Field: "snapshot", File: "a.pickle", Data: raw}, {Field: "model_file", File: "a.yaml", Data: []byte("x")}, {Field: "model_file", File: "b.yaml", Data: []byte("x")}}, "model_file"},
		{"a field twice", []servertest.Part{{Field: "snapshot", File: "a.pickle", Data: raw}, {Field: "alloc-conf", Value: "expandable_segments:True"}, {Field: "alloc-conf", Value: "expandable_segments:False"}}, "alloc-conf"},
	} {
		res, body := servertest.PostForm(t, ts.URL+"/api/snapshot", c.parts...)
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
	res, b := servertest.PostJSON(t, ts.URL+"/api/maxbatch", map[string]any{"model": "mlp", "gpu": "2TiB"})
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
