package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestRouteWildcardEndpointInMount: the middleware is route-level (r.With) on a wildcard *endpoint*
// ("/files/*") of a mounted sub-router. chi's RoutePatterns then end with that endpoint's pattern,
// which the lookup took for one more mount prefix: it looked up "/api/files/files/x", so the key
// read by URLParam("*") was "files/x" (chi: "x"), and a more specific route matching the doubled
// path gave the wrong scope (found by a review).
func TestRouteWildcardEndpointInMount(t *testing.T) {
	var scope, star string
	probe := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scope = DefaultScope(r)
			_, rctx, unroutable := resolveRoute(r)
			if unroutable || rctx == nil {
				t.Errorf("unroutable")
			} else {
				star = rctx.URLParam("*")
			}
			next.ServeHTTP(w, r)
		})
	}
	ok := func(w http.ResponseWriter, r *http.Request) {}
	sub := chi.NewRouter()
	sub.With(probe).Post("/files/*", ok)
	sub.Post("/files/files/{name}", ok)
	r := chi.NewRouter()
	r.Mount("/api", sub)
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/files/x", nil))
	if scope != "POST /api/files/*" || star != "x" {
		t.Fatalf("scope %q, * = %q; want %q, %q (chi routed to /files/* with * = x)", scope, star, "POST /api/files/*", "x")
	}
}
