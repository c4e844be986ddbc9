package httpx

import (
	"io"
	"net/http"
	"testing"
)

// TestURLParamAndServeMuxPlacement pins what the URLParam documentation says of http.ServeMux: a
// middleware wrapped around the whole mux runs before the mux matched a pattern, so URLParam finds no
// path value there (400 missing-key), while on the mux's route it gets the parameter and guards the
// call. Nothing said so, and the README's net/http example wraps the whole mux (found by a defect
// hunt).
func TestURLParamAndServeMuxPlacement(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Key: URLParam("id")}, nil)
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		_, _ = io.WriteString(w, "paid "+r.PathValue("id"))
	})

	outside := http.NewServeMux()
	outside.Handle("POST /orders/{id}/pay", pay)
	srv, client := newServer(t, bd.mw(outside))
	if c, _, b := send(t, client, http.MethodPost, srv.URL+"/orders/7/pay", "", `{}`); c != http.StatusBadRequest || bd.calls.Load() != 0 {
		t.Fatalf("middleware around the mux: %d %s, %d runs; want 400 missing-key, no run", c, b, bd.calls.Load())
	}

	inside := http.NewServeMux()
	inside.Handle("POST /orders/{id}/pay", bd.mw(pay))
	srv, client = newServer(t, inside)
	for i := range 2 {
		c, h, b := send(t, client, http.MethodPost, srv.URL+"/orders/7/pay", "", `{}`)
		if c != http.StatusOK || b != "paid 7" || (i == 1) != (h.Get(ReplayedHeader) == "true") {
			t.Fatalf("middleware on the route, call %d: %d %q (replayed %q)", i+1, c, b, h.Get(ReplayedHeader))
		}
	}
	if bd.calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", bd.calls.Load())
	}
}
