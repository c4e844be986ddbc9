package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestRoutePathRegexpMount: a sub-router mounted under a pattern with a regexp parameter and
// StripSlashes + the middleware inside it. The fallback lookup glues the mount's *pattern*
// ("/v{version:[0-9]+}") to RoutePath, and the regexp does not match its own pattern text: the
// request is taken for unroutable and passes through unguarded, while chi routes it to the handler.
func TestRoutePathRegexpMount(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	sub := chi.NewRouter()
	sub.Use(chimw.StripSlashes, bd.mw)
	sub.Post("/orders", bd.serve)
	r := chi.NewRouter()
	r.Mount("/v{version:[0-9]+}", sub)
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", "/v1/orders/", "k-re", `{"amount":1}`))
		t.Logf("call %d: %d replayed=%q", i, rec.Code, rec.Header().Get(ReplayedHeader))
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key", n)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req("POST", "/v1/orders/", "", `{"amount":1}`))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", rec.Code)
	}
}

// TestRoutePathMountParamValue: with a plain {param} in the mount pattern, the routing context
// the lookup returns holds the pattern text as the parameter's value: URLParam reads "{tenant}".
func TestRoutePathMountParamValue(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Key: URLParam("tenant")}, nil)
	sub := chi.NewRouter()
	sub.Use(chimw.StripSlashes, bd.mw)
	sub.Post("/orders", bd.serve)
	r := chi.NewRouter()
	r.Mount("/tenants/{tenant}", sub)
	// Two tenants, each its own key: both must run.
	for _, p := range []string{"/tenants/acme/orders/", "/tenants/globex/orders/"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", p, "", `{"amount":1}`))
		t.Logf("%s: %d replayed=%q", p, rec.Code, rec.Header().Get(ReplayedHeader))
	}
	if n := bd.calls.Load(); n != 2 {
		t.Fatalf("the handler ran %d times for two tenants (the key read from the lookup is the pattern text)", n)
	}
}

// TestRoutePathMountedRoutesByRoutePath: in a mounted sub-router with StripSlashes, the lookup
// first tries the unrewritten URL path, which can match another route than the one chi routes to
// ("/orders/*" for "/orders/"): the same key on "/api/orders" and "/api/orders/" (one handler) gets
// two scopes and runs twice.
func TestRoutePathMountedRoutesByRoutePath(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	sub := chi.NewRouter()
	sub.Use(chimw.StripSlashes, bd.mw)
	sub.Post("/orders", bd.serve)
	sub.Post("/orders/*", func(w http.ResponseWriter, r *http.Request) { t.Errorf("catch-all ran"); w.WriteHeader(500) })
	r := chi.NewRouter()
	r.Mount("/api", sub)
	for _, p := range []string{"/api/orders", "/api/orders/"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", p, "k-same", `{"amount":1}`))
		t.Logf("%s: %d replayed=%q", p, rec.Code, rec.Header().Get(ReplayedHeader))
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key", n)
	}
}

// Same at the root: with StripSlashes at the root the lookup uses RoutePath (fixed); control.
func TestRoutePathRootRoutesByRoutePath(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	r := chi.NewRouter()
	r.Use(chimw.StripSlashes, bd.mw)
	r.Post("/orders", bd.serve)
	r.Post("/orders/*", func(w http.ResponseWriter, r *http.Request) { t.Errorf("catch-all ran"); w.WriteHeader(500) })
	for _, p := range []string{"/orders", "/orders/"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", p, "k-same", `{"amount":1}`))
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key", n)
	}
}
