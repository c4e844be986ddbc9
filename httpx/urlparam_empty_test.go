package httpx

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestURLParamEmptyIsInvalid: chi matches a route parameter in the middle of a path to an empty
// segment ("/orders//pay" for "/orders/{id}/pay"), and URLParam took the empty value for no key:
// 400 missing-key (its detail asking for an Idempotency-Key header), and with Optional the request
// ran unguarded, every retry again. A key the path gives empty is a key given empty, as ?key= with
// Query or {"id":""} with JSONFields: 400 invalid-key, also with Optional, the handler not run
// (found by a defect hunt).
func TestURLParamEmptyIsInvalid(t *testing.T) {
	for _, optional := range []bool{false, true} {
		bd := setup(t, memoryBackend, &Options{Key: URLParam("id"), Optional: optional}, nil)
		r := chi.NewRouter()
		r.Use(bd.mw)
		r.Post("/orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
			bd.calls.Add(1)
			_, _ = io.WriteString(w, "paid "+chi.URLParam(r, "id"))
		})
		srv, client := newServer(t, r)
		for i := range 2 {
			c, h, b := send(t, client, http.MethodPost, srv.URL+"/orders//pay", "", `{}`)
			rec := httptest.NewRecorder()
			rec.Code, rec.Body = c, bytes.NewBufferString(b)
			maps.Copy(rec.Header(), h)
			if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey || bd.calls.Load() != 0 {
				t.Fatalf("Optional %v, call %d: %d %s (handler ran %d times); want 400 invalid-key, never run",
					optional, i+1, rec.Code, rec.Body, bd.calls.Load())
			}
		}
		// A ServeMux remainder wildcard matched to nothing, the middleware on the route.
		mux := http.NewServeMux()
		mux.Handle("POST /files/{id...}", bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bd.calls.Add(1)
		})))
		muxSrv, muxClient := newServer(t, mux)
		if c, _, b := send(t, muxClient, http.MethodPost, muxSrv.URL+"/files/", "", `{}`); c != http.StatusBadRequest || !strings.Contains(b, "#"+ProblemInvalidKey) || bd.calls.Load() != 0 {
			t.Fatalf("Optional %v, ServeMux /files/: %d %s (handler ran %d times); want 400 invalid-key, never run", optional, c, b, bd.calls.Load())
		}
		// A parameter with a value is still the key.
		for i := range 2 {
			c, h, b := send(t, client, http.MethodPost, srv.URL+"/orders/7/pay", "", `{}`)
			if c != http.StatusOK || b != "paid 7" || (i == 1) != (h.Get(ReplayedHeader) == "true") {
				t.Fatalf("Optional %v, /orders/7/pay call %d: %d %q (replayed %q)", optional, i+1, c, b, h.Get(ReplayedHeader))
			}
		}
	}
}
