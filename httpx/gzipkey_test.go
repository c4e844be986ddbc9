package httpx

import (
	"net/http"
	"testing"
	"time"
)

// TestGzipBodyJSONFieldsKey: JSONFields read the raw request body, so a JSON body sent gzip-encoded
// (Content-Encoding: gzip) had no key: every such request got 400 missing-key, though the
// fingerprint already took the body by what it decodes to. Key sources read the decoded document:
// the first request runs, a retry compressed afresh (with another time stamp, noise changed)
// replays, and another order id is another key (found by a defect hunt).
func TestGzipBodyJSONFieldsKey(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Key: JSONFields("order.id"), Noise: []string{"sentAt"}}, nil)
	send := func(body string) *http.Response {
		r := req("POST", "/orders", "", body, "Content-Encoding", "gzip")
		return bd.do(r).Result()
	}
	if got := send(gzipped(t, `{"order":{"id":"o-1"},"sentAt":"10:00:00"}`, time.Unix(1700000000, 0))); got.StatusCode != http.StatusCreated {
		t.Fatalf("first request: %d, want 201", got.StatusCode)
	}
	got := send(gzipped(t, `{"sentAt":"10:00:05","order":{"id":"o-1"}}`, time.Unix(1700000005, 0)))
	if got.StatusCode != http.StatusCreated || got.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry compressed again: %d, replayed %q; want the stored 201", got.StatusCode, got.Header.Get(ReplayedHeader))
	}
	if got := send(gzipped(t, `{"order":{"id":"o-2"}}`, time.Unix(1700000000, 0))); got.StatusCode != http.StatusCreated || got.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("another order: %d, replayed %q; want a fresh 201", got.StatusCode, got.Header.Get(ReplayedHeader))
	}
	if n := bd.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	// A body that is not a valid gzip stream has no key, as a body that is not JSON.
	if got := send("\x1f\x8bnot really gzip"); got.StatusCode != http.StatusBadRequest {
		t.Fatalf("corrupt gzip: %d, want 400", got.StatusCode)
	}
}
