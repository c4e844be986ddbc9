package httpx

import (
	"io"
	"net/http"
	"testing"
)

// TestAllowAndContentRangeReplayed: a stored 405 is replayed with its Allow, and a stored 206 with
// its Content-Range and Accept-Ranges. HTTP requires both (RFC 9110 15.5.6, 15.3.7); they were left
// out of DefaultReplayHeaders, so a replayed 405 named no method and a replayed 206 no range.
func TestAllowAndContentRangeReplayed(t *testing.T) {
	bd := setup(t, realBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		if r.URL.Path == "/405" {
			w.Header().Set("Allow", "GET, HEAD")
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Range", "bytes 0-3/10")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "0123")
	}))
	srv, client := newServer(t, h)
	for i := range 2 {
		s, hd, _ := send(t, client, http.MethodPost, srv.URL+"/405", "k-405", "{}")
		if s != http.StatusMethodNotAllowed || hd.Get("Allow") != "GET, HEAD" {
			t.Fatalf("response %d: %d, Allow %q; want 405 with Allow \"GET, HEAD\"", i+1, s, hd.Get("Allow"))
		}
	}
	for i := range 2 {
		s, hd, b := send(t, client, http.MethodPost, srv.URL+"/206", "k-206", "{}")
		if s != http.StatusPartialContent || hd.Get("Content-Range") != "bytes 0-3/10" || hd.Get("Accept-Ranges") != "bytes" || b != "0123" {
			t.Fatalf("response %d: %d, Content-Range %q, Accept-Ranges %q, body %q", i+1, s, hd.Get("Content-Range"), hd.Get("Accept-Ranges"), b)
		}
	}
	if n := bd.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}
