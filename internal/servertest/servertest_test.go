package servertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	ogórek "github.com/kisielk/og-rek"
)

// PostJSON sends its body as JSON; PostForm sends fields as fields and
// files as files.
func TestPost(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "application/json" {
			io.Copy(w, r.Body)
			return
		}
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f, h, err := r.FormFile("f")
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		defer f.Close()
		data, _ := io.ReadAll(f)
		fmt.Fprintf(w, "%s %s %s", r.FormValue("a"), h.Filename, data)
	}))
	defer ts.Close()

	res, body := PostJSON(t, ts.URL, map[string]any{"model": "mlp"})
	var got map[string]any
	if err := json.Unmarshal(body, &got); res.StatusCode != 200 || err != nil || got["model"] != "mlp" {
		t.Errorf("PostJSON: %d %s (%v)", res.StatusCode, body, err)
	}
	res, body = PostForm(t, ts.URL, Part{Field: "a", Value: "1"}, Part{Field: "f", File: "x.yaml", Data: []byte("layers: []")})
	if res.StatusCode != 200 || string(body) != "1 x.yaml layers: []" {
		t.Errorf("PostForm: %d %q", res.StatusCode, body)
	}
}

// QuickEstimate passes against a server that answers at once.
func TestQuickEstimate(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/estimate" {
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	QuickEstimate(t, ts.URL)
}

// SnapshotFixture decodes as the pickle it stands for, one device's six
// trace entries, and WriteSnapshotFixture writes such a pickle. (The
// bytes differ from one encoding to the next: dicts are Go maps.)
func TestSnapshotFixture(t *testing.T) {
	written, err := os.ReadFile(WriteSnapshotFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"SnapshotFixture": SnapshotFixture(t), "WriteSnapshotFixture": written} {
		v, err := ogórek.NewDecoder(bytes.NewReader(b)).Decode()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		snap, ok := v.(map[any]any)
		if !ok {
			t.Fatalf("%s: decoded %T, want a dict", name, v)
		}
		traces, _ := snap["device_traces"].([]any)
		if len(traces) != 1 {
			t.Fatalf("%s: device_traces %v", name, snap["device_traces"])
		}
		if entries, _ := traces[0].([]any); len(entries) != 6 {
			t.Errorf("%s: %d trace entries, want 6", name, len(entries))
		}
	}
}

// SyncBuffer takes writes from several goroutines at once.
func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("%d bytes, want 800", n)
	}
}
