package httpx

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"testing"
)

// multipartBody encodes fields (name, value pairs) and a file as multipart/form-data under a fresh
// random boundary, as curl -F, browsers and most client libraries do for each request they build.
func multipartBody(t *testing.T, file string, fields ...string) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := mw.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile("upload", "invoice.pdf")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write([]byte(file))
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), mw.FormDataContentType()
}

// TestMultipartRetryWithNewBoundary: a multipart/form-data upload retried with its key, rebuilt by
// the client with a new random boundary (curl -F, browsers, Python's requests and Go's
// mime/multipart choose one per request), was fingerprinted by its raw bytes, boundary included:
// every such retry got 422 payload-mismatch instead of the stored response. Multipart bodies are
// fingerprinted by their parts (headers and content, in order), not by the boundary; a retry
// changing a part is still a mismatch (found by a defect hunt).
func TestMultipartRetryWithNewBoundary(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	send := func(file string, fields ...string) *http.Response {
		body, ct := multipartBody(t, file, fields...)
		r := req("POST", "/uploads", "k-upload", body)
		r.Header.Set("Content-Type", ct)
		return bd.do(r).Result()
	}
	if got := send("%PDF-1.7", "amount", "10", "note", "march"); got.StatusCode != http.StatusCreated {
		t.Fatalf("first upload: %d", got.StatusCode)
	}
	got := send("%PDF-1.7", "amount", "10", "note", "march")
	if got.StatusCode != http.StatusCreated || got.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry with a new boundary: %d, replayed %q; want the stored 201", got.StatusCode, got.Header.Get(ReplayedHeader))
	}
	for _, c := range []struct {
		name   string
		file   string
		fields []string
	}{
		{"another field value", "%PDF-1.7", []string{"amount", "11", "note", "march"}},
		{"another file", "%PDF-1.6", []string{"amount", "10", "note", "march"}},
		{"fields in another order", "%PDF-1.7", []string{"note", "march", "amount", "10"}},
	} {
		if got := send(c.file, c.fields...); got.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("%s: %d, want 422", c.name, got.StatusCode)
		}
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
