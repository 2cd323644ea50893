//go:build unix

package hostile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is a `batchfit serve` subprocess on a loopback port the kernel
// picked.
type server struct {
	cmd  *exec.Cmd
	addr string // host:port
	url  string
}

func startServer(t *testing.T) *server {
	t.Helper()
	cmd := exec.Command(batchfit, "serve", "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// "batchfit: serving http://127.0.0.1:PORT/ (Ctrl-C stops)"
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
		io.Copy(io.Discard, out)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("batchfit serve said nothing within 10s")
	}
	_, rest, ok := strings.Cut(line, "http://")
	addr, _, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		t.Fatalf("batchfit serve said %q, want its address", line)
	}
	return &server{cmd: cmd, addr: addr, url: "http://" + addr}
}

// memory reads a field of the server's /proc/PID/status (VmRSS: resident
// now; VmHWM: the most it has been resident), in bytes.
func (s *server) memory(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/PID/status", field)
	return 0
}

// estimate posts a normal estimate and fails the test unless it is
// answered 200 within within.
func (s *server) estimate(t *testing.T, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: within + 2*time.Second}
	start := time.Now()
	res, err := c.Post(s.url+"/api/estimate", "application/json", strings.NewReader(`{"model":"mlp","gpu":"t4"}`))
	if err != nil {
		t.Fatalf("a normal estimate: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if el := time.Since(start); res.StatusCode != 200 || el > within {
		t.Fatalf("a normal estimate: %d after %s, want 200 within %s", res.StatusCode, el.Round(time.Millisecond), within)
	}
}

// upload posts one file as the multipart part field (model_file or
// snapshot) and returns the status and the start of the answer.
func (s *server) upload(t *testing.T, path, field, name string, data []byte) (int, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if field == "model_file" {
		mw.WriteField("gpu", "t4")
	}
	w, _ := mw.CreateFormFile(field, name)
	w.Write(data)
	mw.Close()
	return s.post(t, path, mw.FormDataContentType(), &b)
}

func (s *server) post(t *testing.T, path, ct string, body io.Reader) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	res, err := c.Post(s.url+path, ct, body)
	if err != nil {
		// the server answered and closed the connection before the
		// client finished sending (a body over a limit): no status
		return 0, err.Error()
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 300))
	return res.StatusCode, string(msg)
}

// refused wants a 4xx answer (the input named as bad), not a 2xx (the
// bomb accepted) or a 5xx (a panic, a timeout). A body over the server's
// limit for its kind may instead be cut off while it is sent (code 0, the
// connection reset).
func refused(t *testing.T, what string, code int, msg string) {
	t.Helper()
	t.Logf("%s: %d %s", what, code, strings.TrimSpace(msg))
	if code == 0 && (strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")) {
		return
	}
	if code < 400 || code > 499 {
		t.Errorf("%s: answered %d %s, want a 4xx refusal", what, code, msg)
	}
}

// slowBody is a client that declares a 100000-byte multipart body, sends
// head and then a byte every 2 s; it returns the status line the server
// answers, if any.
func slowBody(addr, head string, stop time.Duration) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/estimate HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 100000\r\n\r\n%s", addr, head)
	for end := time.Now().Add(stop); time.Now().Before(end); {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("a")); err != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// TestServe sends a default `batchfit serve` (2 workers, so 8 reading
// slots) the probe's hostile requests, and after each group wants a
// normal estimate answered within serveAnswer, and the server's resident
// set under serveMemory.
func TestServe(t *testing.T) {
	s := startServer(t)
	s.estimate(t, 5*time.Second) // the first answer warms the zoo
	t.Logf("at rest: VmRSS %d MiB", s.memory(t, "VmRSS")>>20)
	check := func(after string) {
		t.Helper()
		s.estimate(t, serveAnswer)
		rss, hwm := s.memory(t, "VmRSS"), s.memory(t, "VmHWM")
		t.Logf("after %s: VmRSS %d MiB, VmHWM %d MiB", after, rss>>20, hwm>>20)
		if rss > serveMemory || hwm > serveMemory {
			t.Fatalf("after %s: VmRSS %d MiB, VmHWM %d MiB, over the %d MiB bound", after, rss>>20, hwm>>20, serveMemory>>20)
		}
	}

	// The uploads that panicked the parser and leaked a reading slot each:
	// more of them than there are slots.
	for i := 0; i < 10; i++ {
		for _, m := range []int{99, -1} {
			code, msg := s.upload(t, "/api/estimate", "model_file", "m.bfgraph", mutates(t, m))
			if i == 0 {
				refused(t, fmt.Sprintf("mutates [%d]", m), code, msg)
			} else if code < 400 || code > 499 {
				t.Errorf("upload %d of mutates [%d]: %d %s", i, m, code, msg)
			}
		}
	}
	check("20 uploads of mutates [99] and [-1]")

	// Bombs, two at once as in the probe.
	bomb := opsBomb(t, 3_000_000)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, msg := s.upload(t, "/api/estimate", "model_file", "bomb.bfgraph.gz", bomb)
			refused(t, fmt.Sprintf("%d-byte .bfgraph.gz of 3 million ops", len(bomb)), code, msg)
		}()
	}
	wg.Wait()
	name := hugeString(t, `{"format":"batchfit-graph","version":1,"name":"`, 1<<30, `"}`)
	code, msg := s.upload(t, "/api/estimate", "model_file", "name.bfgraph.gz", name)
	refused(t, fmt.Sprintf("%d-byte .bfgraph.gz of one 1 GiB name", len(name)), code, msg)
	check("the .bfgraph.gz bombs")

	memo := memoBomb(20_000_000)
	code, msg = s.upload(t, "/api/snapshot", "snapshot", "memo.pickle", memo)
	refused(t, fmt.Sprintf("%d MB snapshot of 20 million references", len(memo)>>20), code, msg)
	memoGz := gz(t, func(w io.Writer) { w.Write(memo) })
	code, msg = s.upload(t, "/api/snapshot", "snapshot", "memo.pickle.gz", memoGz)
	refused(t, fmt.Sprintf("%d-byte .pickle.gz of 20 million references", len(memoGz)), code, msg)
	code, msg = s.post(t, "/api/snapshot", "application/octet-stream", bytes.NewReader(memo))
	refused(t, fmt.Sprintf("%d MB raw body", len(memo)>>20), code, msg)
	str := pickleHugeString(t, 1<<30)
	code, msg = s.upload(t, "/api/snapshot", "snapshot", "str.pickle.gz", str)
	refused(t, fmt.Sprintf("%d-byte .pickle.gz of one 1 GiB string", len(str)), code, msg)
	check("the snapshot bombs")

	// Slow bodies in every reading slot (8: 4 a worker), half of them
	// stalled in a field's value, half in a part's header: the server
	// stops reading them after its grace (5 s) at its minimum rate (32
	// KiB/s), so an estimate sent among them waits at most that long, and
	// once they are cut off one is answered within serveAnswer.
	const value, header = "--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n", "--x\r\n"
	slots := 8
	status := make([]string, slots)
	start := time.Now()
	for i := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			head := value
			if i%2 == 1 {
				head = header
			}
			status[i] = slowBody(s.addr, head, 12*time.Second)
		}()
	}
	time.Sleep(500 * time.Millisecond)
	s.estimate(t, 8*time.Second)
	wg.Wait()
	t.Logf("slow bodies answered within %s: %q", time.Since(start).Round(time.Second), status)
	for i, st := range status {
		// Stalled in a value or in a part's header, the body is
		// refused 408.
		if !strings.Contains(st, " 408 ") {
			t.Errorf("slow client %d: %q, want 408", i, st)
		}
	}
	check("8 slow bodies")
}
