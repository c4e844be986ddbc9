package httpx

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestPathRewriteAfterTheMiddleware: chi middleware that rewrites the path chi routes by
// (StripSlashes, CleanPath, URLFormat) placed after this one (r.Use(mw, middleware.StripSlashes))
// rewrites it only once this middleware has looked the route up by the path as sent, found none, and
// let the request through as one chi would answer 404: every keyed duplicate of POST /orders/ ran
// the handler again, unguarded. A request chi cannot route that carries a key is now guarded, by its
// path; one without a key still gets chi's 404 or 405 with no key asked of it.
func TestPathRewriteAfterTheMiddleware(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func(http.Handler) http.Handler
		path    string
	}{
		{"StripSlashes", chimw.StripSlashes, "/orders/"},
		{"CleanPath", chimw.CleanPath, "//orders"},
		{"URLFormat", chimw.URLFormat, "/orders.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, memoryBackend, nil, nil)
			r := chi.NewRouter()
			r.Use(bd.mw, tc.rewrite)
			r.Post("/orders", bd.serve)
			first := bd.doR(r, req("POST", tc.path, "k1", `{"amount":1}`))
			second := bd.doR(r, req("POST", tc.path, "k1", `{"amount":1}`))
			if n := bd.calls.Load(); n != 1 || first.Code != http.StatusCreated || second.Code != http.StatusCreated || second.Header().Get(ReplayedHeader) != "true" {
				t.Fatalf("POST %s twice with one key: %d runs, statuses %d, %d (replayed %q); want 1 run and a replay",
					tc.path, n, first.Code, second.Code, second.Header().Get(ReplayedHeader))
			}
			if rec := bd.doR(r, req("POST", tc.path, "k1", `{"amount":2}`)); rec.Code != http.StatusUnprocessableEntity {
				t.Fatalf("the key with another body: %d, want 422", rec.Code)
			}
			if rec := bd.doR(r, req("POST", "/nowhere", "", `{}`)); rec.Code != http.StatusNotFound {
				t.Fatalf("unroutable without a key: %d, want chi's 404", rec.Code)
			}
			if rec := bd.doR(r, req("POST", "/nowhere", "k2", `{}`)); rec.Code != http.StatusNotFound || bd.calls.Load() != 1 {
				t.Fatalf("unroutable with a key: %d, %d runs; want chi's 404", rec.Code, bd.calls.Load())
			}
		})
	}
}
