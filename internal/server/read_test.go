package server

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzServeRequest: any body under any content type is read into a
// request or refused with an error; reading never panics, and the fields
// it passes on are flags the server allows.
func FuzzServeRequest(f *testing.F) {
	s := New(Options{MaxUpload: 1 << 20, Workers: 1, Run: fakeRun})
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("batch", "8")
	w, _ := mw.CreateFormFile("model_file", "m.yaml")
	w.Write([]byte("layers: []"))
	mw.Close()
	f.Add("application/json", []byte(`{"model":"mlp","batch":8,"fused":true}`))
	f.Add("application/x-www-form-urlencoded", []byte("model=mlp&batch=1:8"))
	f.Add(mw.FormDataContentType(), mp.Bytes())
	f.Add("multipart/form-data; boundary=x", []byte("--x\r\nContent-Disposition: form-data; name=\"snapshot\"; filename=\"s\"\r\n\r\n\x80\x04\r\n--x--\r\n"))
	f.Add("", []byte(`{"message": "CUDA out of memory"}`))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		r := httptest.NewRequest("POST", "/api/estimate", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 1<<20)
		req, err := s.read(r.Context(), r, endpoints["/api/estimate"])
		if err != nil {
			return
		}
		for _, a := range req.args {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !fieldName.MatchString(name) || reserved[name] {
				t.Fatalf("argument %q passed on", a)
			}
		}
	})
}

// fakeRun stands in for the commands: it answers every command with an
// empty JSON object, for tests of the server's own work (reading,
// limits, slots).
func fakeRun(ctx context.Context, cmd string, args []string, in Inputs, stdout io.Writer) error {
	_, err := io.WriteString(stdout, "{}\n")
	return err
}

// Host headers that name this machine by a loopback name or address are
// told from those that do not.
func TestLoopbackHost(t *testing.T) {
	for _, h := range []string{"127.0.0.1:80", "[::1]:8080", "localhost", "LOCALHOST:1"} {
		if !loopbackHost(h) {
			t.Errorf("%s is not taken for this machine", h)
		}
	}
	for _, h := range []string{"10.0.0.1:80", "example.com", "127.0.0.1.nip.io"} {
		if loopbackHost(h) {
			t.Errorf("%s is taken for this machine", h)
		}
	}
}
