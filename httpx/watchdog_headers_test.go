package httpx

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestWatchdogUnavailableCarriesNoHandlerHeaders: the 503 answering a handler the Guard's watchdog
// cancelled, which gave up having set headers but answered nothing, went out with those headers: a
// Content-Encoding the handler set for the body it meant to write made the problem+json body
// undecodable (Go's client failed reading it), and its Set-Cookie and Location came with an
// answer that says nothing was done. The problem carries only its own fields and those of outer
// middleware.
func TestWatchdogUnavailableCarriesNoHandlerHeaders(t *testing.T) {
	guard := memoryGuard(t, &idemkit.Options{Watchdog: true, MaxHold: 50 * time.Millisecond, Lease: 150 * time.Millisecond})
	h := Middleware(guard, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Encoding", "gzip")
		h.Set("Location", "/orders/1")
		h.Set("Set-Cookie", "session=new")
		h.Set("Trailer", "Etag")
		<-r.Context().Done() // gives up, answering nothing
	}))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*") // an outer middleware's field stays
		h.ServeHTTP(w, r)
	})
	srv, client := newServer(t, outer)
	r, err := http.NewRequest("POST", srv.URL+"/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(DefaultHeader, "k-hold-headers")
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the 503: %v (Content-Encoding %q)", err, resp.Header.Get("Content-Encoding"))
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q %s, want 503 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	for _, name := range []string{"Content-Encoding", "Location", "Set-Cookie", "Trailer"} {
		if v := resp.Header.Values(name); len(v) > 0 {
			t.Errorf("the 503 carries the handler's %s: %q", name, v)
		}
	}
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("the outer middleware's field is gone")
	}
}
