package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/servertest"
	"github.com/batchfit/batchfit/predict"
)

// A parser's panic is answered 500 with a one-line error and logged, and
// gives back the reading slot it held: more such uploads than there are
// slots (4 a worker) leave the server answering.
func TestServePanicReleasesSlots(t *testing.T) {
	log := &servertest.SyncBuffer{}
	srv := New(Options{MaxUpload: 1 << 20, Workers: 1, Loopback: true, Log: log, Run: fakeRun})
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
		res, err := servertest.QuickClient.Post(ts.URL+"/api/estimate", mw.FormDataContentType(), &b)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e APIError
		if res.StatusCode != 500 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "internal error: parser bug on two lines") {
			t.Fatalf("upload %d: %d %s, want 500 and the panic on one line", i, res.StatusCode, body)
		}
	}
	if n := strings.Count(log.String(), "internal error: parser bug"); n != slots+2 {
		t.Errorf("%d panics logged, want %d:\n%.500s", n, slots+2, log.String())
	}
	servertest.QuickEstimate(t, ts.URL)
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
	srv := New(Options{MaxUpload: 1 << 20, Workers: 1, Loopback: true, BodyGrace: 200 * time.Millisecond, MinBodyRate: 1000, Run: fakeRun})
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
	servertest.QuickEstimate(t, ts.URL)
	wg.Wait()
	for i, s := range status {
		if !strings.Contains(s, " 408 ") {
			t.Errorf("slow client %d: %q, want 408", i, s)
		}
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
