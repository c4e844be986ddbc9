package httpx

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"testing"
	"time"
)

// gzipped compresses body as gzip with the header's modification time set to mtime, as clients
// that stamp the time of compression do (Python's gzip.compress, for one).
func gzipped(t *testing.T, body string, mtime time.Time) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.ModTime = mtime
	if _, err := zw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGzipBodyRetryReplays: a JSON body sent gzip-encoded (Content-Encoding: gzip) was fingerprinted
// by its compressed bytes, which differ between two compressions of the same document (the gzip
// header's time stamp), and Noise fields inside it were never removed: every retry with its key got
// 422 payload-mismatch instead of the stored response. A gzip body is fingerprinted by what it
// decodes to (canonical JSON without noise for a JSON body); a changed document is still a
// mismatch, and so is the same document sent unencoded (found by a defect hunt).
func TestGzipBodyRetryReplays(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Noise: []string{"sentAt"}}, nil)
	var handlerGot []byte
	bd.handler = bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		handlerGot = b.Bytes()
		bd.serve(w, req("POST", "/orders", "", ""))
	}))
	send := func(body, encoding string) *http.Response {
		r := req("POST", "/orders", "k-gzip", body)
		if encoding != "" {
			r.Header.Set("Content-Encoding", encoding)
		}
		return bd.do(r).Result()
	}
	first := gzipped(t, `{"amount":10,"sentAt":"10:00:00"}`, time.Unix(1700000000, 0))
	if got := send(first, "gzip"); got.StatusCode != http.StatusCreated {
		t.Fatalf("first request: %d", got.StatusCode)
	}
	if string(handlerGot) != first {
		t.Fatal("the handler did not read the body as sent (gzip-encoded)")
	}
	got := send(gzipped(t, `{"sentAt":"10:00:05", "amount":10.0}`, time.Unix(1700000005, 0)), "gzip")
	if got.StatusCode != http.StatusCreated || got.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry compressed again: %d, replayed %q; want the stored 201", got.StatusCode, got.Header.Get(ReplayedHeader))
	}
	for _, c := range []struct{ name, body, encoding string }{
		{"another amount", gzipped(t, `{"amount":11,"sentAt":"10:00:00"}`, time.Unix(1700000000, 0)), "gzip"},
		{"the same document unencoded", `{"amount":10,"sentAt":"10:00:00"}`, ""},
		{"not gzip at all", "\x1f\x8bnot really gzip", "gzip"},
	} {
		if got := send(c.body, c.encoding); got.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("%s: %d, want 422", c.name, got.StatusCode)
		}
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
