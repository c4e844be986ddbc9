package httpx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestScopeWithRouters checks the default scope is the full route pattern wherever the middleware
// sits in a chi router, and the pattern or path under http.ServeMux.
func TestScopeWithRouters(t *testing.T) {
	tests := []struct {
		name   string
		router func(bd *bundle) http.Handler
		path   string
		scope  string
	}{
		{"chi r.Use on the root router", func(bd *bundle) http.Handler {
			r := chi.NewRouter()
			r.Use(bd.mw)
			r.Post("/orders/{id}/pay", bd.serve)
			return r
		}, "/orders/7/pay", "POST /orders/{id}/pay"},
		{"chi r.Use on a mounted sub-router", func(bd *bundle) http.Handler {
			sub := chi.NewRouter()
			sub.Use(bd.mw)
			sub.Post("/orders/{id}", bd.serve)
			r := chi.NewRouter()
			r.Mount("/api", sub)
			return r
		}, "/api/orders/7", "POST /api/orders/{id}"},
		{"chi r.Use on the root above a mounted sub-router", func(bd *bundle) http.Handler {
			sub := chi.NewRouter()
			sub.Post("/orders/{id}", bd.serve)
			r := chi.NewRouter()
			r.Use(bd.mw)
			r.Mount("/api", sub)
			return r
		}, "/api/orders/7", "POST /api/orders/{id}"},
		{"chi r.With", func(bd *bundle) http.Handler {
			r := chi.NewRouter()
			r.With(bd.mw).Post("/orders/{id}", bd.serve)
			return r
		}, "/orders/7", "POST /orders/{id}"},
		{"chi Group", func(bd *bundle) http.Handler {
			r := chi.NewRouter()
			r.Route("/v1", func(r chi.Router) {
				r.Group(func(r chi.Router) {
					r.Use(bd.mw)
					r.Post("/orders/{id}", bd.serve)
				})
			})
			return r
		}, "/v1/orders/7", "POST /v1/orders/{id}"},
		{"ServeMux pattern", func(bd *bundle) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{id}", bd.mw(http.HandlerFunc(bd.serve)))
			return mux
		}, "/orders/7", "POST /orders/{id}"},
		{"ServeMux wrapped whole: the path", func(bd *bundle) http.Handler {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders/{id}", bd.serve)
			return bd.mw(mux)
		}, "/orders/7", "POST /orders/7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bd := setup(t, memoryBackend, nil, nil)
			h := tt.router(bd)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req("POST", tt.path, "k", `{}`))
			if rec.Code != 201 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if _, err := bd.guard.Get(context.Background(), tt.scope, "k"); err != nil {
				t.Fatalf("no record under scope %q: %v", tt.scope, err)
			}
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, req("POST", tt.path, "k", `{}`))
			if rec.Header().Get(ReplayedHeader) != "true" || bd.calls.Load() != 1 {
				t.Fatalf("duplicate not replayed: %d calls", bd.calls.Load())
			}
		})
	}
}

// TestChiUnroutable: a request chi cannot route gets chi's 404 or 405, not a key error.
func TestChiUnroutable(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.Post("/orders", bd.serve)
	r.Get("/items", bd.serve)
	for path, want := range map[string]int{"/nowhere": 404, "/items": 405} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", path, "", `{}`))
		if rec.Code != want {
			t.Errorf("POST %s: %d, want %d", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req("POST", "/orders", "", `{}`))
	if rec.Code != 400 {
		t.Fatalf("POST /orders without a key: %d", rec.Code)
	}
}

// TestChiHandBuiltContext: a chi context built by hand (handler tests) has no router; the request
// is guarded with its URL parameters, never waved through as unroutable.
func TestChiHandBuiltContext(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Key: URLParam("id")}, nil)
	for i, want := range []int{201, 201} {
		rctx := chi.NewRouteContext()
		rctx.URLParams.Add("id", "42")
		r := req("POST", "/orders/42", "", `{}`)
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		rec := bd.do(r)
		if rec.Code != want || (i == 1) != (rec.Header().Get(ReplayedHeader) == "true") {
			t.Fatalf("request %d: %d replayed=%q", i, rec.Code, rec.Header().Get(ReplayedHeader))
		}
	}
	if _, err := bd.guard.Get(context.Background(), "POST /orders/42", "42"); err != nil {
		t.Fatal(err)
	}
}

// TestChiURLParamBeforeRouting: a URL parameter key works from r.Use, before chi routed, and the
// same key and body on another resource of the same route is a mismatch, never a replay.
func TestChiURLParamBeforeRouting(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, &Options{Key: All(URLParam("id"), Header(DefaultHeader))}, nil)
			r := chi.NewRouter()
			r.Use(bd.mw)
			r.Post("/orders/{id}/pay", bd.serve)
			do := func(path, key string) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, req("POST", path, key, `{"amount":5}`))
				return rec
			}
			if rec := do("/orders/1/pay", "k"); rec.Code != 201 {
				t.Fatalf("first: %d %s", rec.Code, rec.Body)
			}
			if rec := do("/orders/1/pay", "k"); rec.Header().Get(ReplayedHeader) != "true" {
				t.Fatalf("duplicate: %d %s", rec.Code, rec.Body)
			}
			if rec := do("/orders/2/pay", "k"); rec.Code != 201 || bd.calls.Load() != 2 {
				t.Fatalf("order 2: %d, %d calls", rec.Code, bd.calls.Load())
			}
			if _, err := bd.guard.Get(context.Background(), "POST /orders/{id}/pay", `["2","k"]`); err != nil {
				t.Fatalf("record of order 2: %v", err)
			}
		})
	}
}

// TestPathInFingerprint: the scope is a pattern, so the path is part of the fingerprint.
func TestPathInFingerprint(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.Post("/orders/{id}/pay", bd.serve)
	for i, want := range []int{201, 422} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req("POST", []string{"/orders/1/pay", "/orders/2/pay"}[i], "k", `{"amount":5}`))
		if rec.Code != want {
			t.Fatalf("request %d: %d, want %d", i, rec.Code, want)
		}
	}
}

// TestServeMuxHostPatternsAreTheirOwnScopes: ServeMux routes of one path on two hosts are two
// operations, with two handlers. The default scope took only the path of their patterns, so a key
// sent to the second host (one tenant's order id, say, by JSONFields) with the body sent to the first
// got the first host's stored response, and the second handler never ran.
func TestServeMuxHostPatternsAreTheirOwnScopes(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	var a, b atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST a.example/orders", bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("order of a"))
	})))
	mux.Handle("POST b.example/orders", bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("order of b"))
	})))
	for _, host := range []string{"a.example", "b.example", "a.example"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req("POST", "http://"+host+"/orders", "order-1", `{"item":"book"}`))
		if want := "order of " + host[:1]; rec.Code != http.StatusCreated || rec.Body.String() != want {
			t.Fatalf("%s: %d %q, want 201 %q", host, rec.Code, rec.Body, want)
		}
	}
	if a.Load() != 1 || b.Load() != 1 {
		t.Fatalf("handler runs: a %d, b %d; want one each", a.Load(), b.Load())
	}
	if _, err := bd.guard.Get(context.Background(), "POST b.example/orders", "order-1"); err != nil {
		t.Fatalf("no record under the host pattern's scope: %v", err)
	}

	// A chi router per host, mounted under the host's pattern, with the middleware in r.Use.
	var c, d atomic.Int64
	hosts := http.NewServeMux()
	for host, runs := range map[string]*atomic.Int64{"c.example": &c, "d.example": &d} {
		r := chi.NewRouter()
		r.Use(bd.mw)
		r.Post("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("order of " + host[:1]))
		})
		hosts.Handle(host+"/", r)
	}
	for _, host := range []string{"c.example", "d.example", "d.example"} {
		rec := httptest.NewRecorder()
		hosts.ServeHTTP(rec, req("POST", "http://"+host+"/orders/1", "order-1", `{"item":"book"}`))
		if want := "order of " + host[:1]; rec.Code != http.StatusCreated || rec.Body.String() != want {
			t.Fatalf("chi under %s: %d %q, want 201 %q", host, rec.Code, rec.Body, want)
		}
	}
	if c.Load() != 1 || d.Load() != 1 {
		t.Fatalf("chi handler runs: c %d, d %d; want one each", c.Load(), d.Load())
	}
	if _, err := bd.guard.Get(context.Background(), "POST d.example/orders/{id}", "order-1"); err != nil {
		t.Fatalf("no record under the host and chi's pattern: %v", err)
	}
}
