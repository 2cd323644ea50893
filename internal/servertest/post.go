package servertest

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

// PostJSON posts body, encoded as JSON, to url and returns the response
// and its body, read in full. It fails the test if the body cannot be
// encoded, posted or read.
func PostJSON(t testing.TB, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, out
}

// Part is one part of a multipart form: a field named Field with the
// value Value or, when File is set, a file of that name holding Data.
type Part struct {
	Field, Value string
	File         string
	Data         []byte
}

// PostForm posts parts to url as a multipart form and returns the
// response and its body. It fails the test if the form cannot be posted.
func PostForm(t testing.TB, url string, parts ...Part) (*http.Response, []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts {
		if p.File == "" {
			mw.WriteField(p.Field, p.Value)
			continue
		}
		w, err := mw.CreateFormFile(p.Field, p.File)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(p.Data)
	}
	mw.Close()
	res, err := http.Post(url, mw.FormDataContentType(), &b)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res, out
}

// QuickClient gives up on an answer after two seconds: a server that
// holds a request longer has failed the test.
var QuickClient = &http.Client{Timeout: 2 * time.Second}

// QuickEstimate posts a small estimate to the server at url and fails the
// test unless it is answered 200 within a second.
func QuickEstimate(t testing.TB, url string) {
	t.Helper()
	start := time.Now()
	res, err := QuickClient.Post(url+"/api/estimate", "application/json", strings.NewReader(`{"model":"mlp","gpu":"t4"}`))
	if err != nil {
		t.Fatalf("a small estimate: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || time.Since(start) > time.Second {
		t.Fatalf("a small estimate: %d after %s, want 200 within a second", res.StatusCode, time.Since(start).Round(time.Millisecond))
	}
}
