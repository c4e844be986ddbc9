package httpx

import (
	"net/http"
	"testing"
)

// TestErrorReplayKeepsNosniff: a stored 400 written with http.Error is replayed with the
// X-Content-Type-Options: nosniff http.Error sets, and a stored 415 to a PATCH with the Accept-Patch
// RFC 5789 asks of it. Both were left out of DefaultReplayHeaders, so the replay of an error answered
// by the standard library's own helper lacked the header its first answer carried.
func TestErrorReplayKeepsNosniff(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		if r.Method == http.MethodPatch {
			w.Header().Set("Accept-Patch", "application/merge-patch+json")
			http.Error(w, "unsupported patch format", http.StatusUnsupportedMediaType)
			return
		}
		http.Error(w, "amount must be positive", http.StatusBadRequest)
	}))
	srv, client := newServer(t, h)
	for i := range 2 {
		s, hd, b := send(t, client, http.MethodPost, srv.URL+"/orders", "k-400", `{"amount":-1}`)
		if s != http.StatusBadRequest || hd.Get("X-Content-Type-Options") != "nosniff" || b != "amount must be positive\n" {
			t.Fatalf("response %d: %d, X-Content-Type-Options %q, body %q; want 400 with nosniff", i+1, s, hd.Get("X-Content-Type-Options"), b)
		}
	}
	for i := range 2 {
		s, hd, _ := send(t, client, http.MethodPatch, srv.URL+"/orders", "k-415", `{}`)
		if s != http.StatusUnsupportedMediaType || hd.Get("Accept-Patch") != "application/merge-patch+json" || hd.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("response %d: %d, Accept-Patch %q, X-Content-Type-Options %q", i+1, s, hd.Get("Accept-Patch"), hd.Get("X-Content-Type-Options"))
		}
	}
	if n := bd.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}
