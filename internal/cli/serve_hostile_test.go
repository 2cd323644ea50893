package cli

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchfit/batchfit/predict"
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

// A parser's panic is answered 500 with a one-line error and logged, and
// gives back the reading slot it held: more such uploads than there are
// slots (4 a worker) leave the server answering.
func TestServePanicReleasesSlots(t *testing.T) {
	log := &syncBuffer{}
	srv := newServer(serveOptions{maxUpload: 1 << 20, workers: 1, loopback: true, log: log})
	srv.openModel = func(*upload) (predict.Source, error) { panic("parser bug\non two lines") }
	ts := httptest.NewServer(srv)
	defer ts.Close()
	slots := cap(srv.reading)
	for i := 0; i < slots+2; i++ {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		w, _ := mw.CreateFormFile("model_file", "m.yaml")
		w.Write([]byte("layers: []\n"))
		mw.Close()
		res, err := quickClient.Post(ts.URL+"/api/estimate", mw.FormDataContentType(), &b)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e apiError
		if res.StatusCode != 500 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "internal error: parser bug on two lines") {
			t.Fatalf("upload %d: %d %s, want 500 and the panic on one line", i, res.StatusCode, body)
		}
	}
	if n := strings.Count(log.String(), "internal error: parser bug"); n != slots+2 {
		t.Errorf("%d panics logged, want %d:\n%.500s", n, slots+2, log.String())
	}
	quickEstimate(t, ts.URL)
}

// slowClient posts a body declared 100000 bytes long a byte every 100ms
// until the server stops reading or two seconds pass, and returns the
// answer's status line (empty if none came within a second more).
func slowClient(addr string, body string) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/estimate HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n%s", addr, body)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("a")); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// Bodies that trickle in (10 bytes a second, under the 1000 the test's
// server asks for after 200ms) stop holding the reading slots: a small
// request posted while they fill every slot is answered within a second,
// and the trickling clients are answered 408.
func TestServeSlowBodies(t *testing.T) {
	srv := newServer(serveOptions{maxUpload: 1 << 20, workers: 1, loopback: true, bodyGrace: 200 * time.Millisecond, minBodyRate: 1000})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	addr := ts.Listener.Addr().String()
	slots := cap(srv.reading)
	status := make([]string, slots)
	var wg sync.WaitGroup
	for i := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status[i] = slowClient(addr, "--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n")
		}()
	}
	time.Sleep(100 * time.Millisecond) // the slow clients hold every slot
	quickEstimate(t, ts.URL)
	wg.Wait()
	for i, s := range status {
		if !strings.Contains(s, " 408 ") {
			t.Errorf("slow client %d: %q, want 408", i, s)
		}
	}
}

// Reading an upload stops at --timeout: a multipart body that stops
// arriving after its first part (within the body rate's 5s of grace) is
// answered 503 at the timeout, not held until the client gives up.
func TestServeReadStopsAtTimeout(t *testing.T) {
	ts := testServer(t, serveOptions{timeout: 300 * time.Millisecond})
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
	ts := testServer(t, serveOptions{base: base})
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
	ts := testServer(t, serveOptions{})
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
		var e apiError
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
	ts := testServer(t, serveOptions{})
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

// A size just past the server's bound is told apart from the bound:
// 2097153 MiB = 2^41 + 2^20 bytes = 2199024304128 and the bound 2 TiB =
// 2^41 = 2199023255552 both round to 2048.00 GiB.
func TestServeGPUBoundMessage(t *testing.T) {
	for _, c := range []struct{ gpu, want string }{
		{"2097153MiB", "2048.00 GiB (2199024304128 bytes) is more than 2048.00 GiB (2199023255552 bytes)"},
		{"4TiB", "4096.00 GiB is more than 2048.00 GiB on this server"},
	} {
		err := webLimit("gpu", c.gpu)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gpu %s: %v, want %q", c.gpu, err, c.want)
		}
	}
}
