package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestRoutePathRewrittenByOuterMiddleware: chi's StripSlashes, CleanPath and URLFormat make chi route
// a request by rctx.RoutePath, not r.URL.Path. The middleware looked the route up by r.URL.Path,
// found none, took the request for one chi will answer 404/405, and let it through unguarded: chi
// then routed it to the POST handler, which ran once per duplicate (found by a defect hunt).
func TestRoutePathRewrittenByOuterMiddleware(t *testing.T) {
	// behind returns a root router guarding POST /orders behind the rewriting middleware outer.
	behind := func(outer func(http.Handler) http.Handler) func(bd *bundle) http.Handler {
		return func(bd *bundle) http.Handler {
			r := chi.NewRouter()
			r.Use(outer, bd.mw)
			r.Post("/orders", bd.serve)
			return r
		}
	}
	for _, tc := range []struct {
		name  string
		build func(bd *bundle) http.Handler
		path  string
	}{
		{"StripSlashes", behind(chimw.StripSlashes), "/orders/"},
		{"CleanPath", behind(chimw.CleanPath), "//orders"},
		{"URLFormat", behind(chimw.URLFormat), "/orders.json"},
		{"StripSlashes in a mounted router", func(bd *bundle) http.Handler {
			sub := chi.NewRouter()
			sub.Use(chimw.StripSlashes, bd.mw)
			sub.Post("/orders", bd.serve)
			r := chi.NewRouter()
			r.Mount("/api", sub)
			return r
		}, "/api/orders/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, memoryBackend, nil, nil)
			h := tc.build(bd)
			key := "k-route"
			first := bd.doR(h, req("POST", tc.path, key, `{"amount":1}`))
			second := bd.doR(h, req("POST", tc.path, key, `{"amount":1}`))
			if n := bd.calls.Load(); n != 1 || second.Header().Get(ReplayedHeader) != "true" {
				t.Errorf("the handler ran %d times for one key (statuses %d, %d; replayed %q)", n, first.Code, second.Code, second.Header().Get(ReplayedHeader))
			}
			// A request without a key must be refused too, not pass through.
			if rec := bd.doR(h, req("POST", tc.path, "", `{"amount":1}`)); rec.Code != http.StatusBadRequest {
				t.Errorf("no key: %d, want 400 missing-key", rec.Code)
			}
			// A path chi cannot route still passes through to its 404.
			if rec := bd.doR(h, req("POST", "/nowhere", "", `{}`)); rec.Code != http.StatusNotFound {
				t.Errorf("unroutable: %d, want 404", rec.Code)
			}
		})
	}
}

func (bd *bundle) doR(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}
