package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestGetHeadAfterTheMiddleware: chi's middleware.GetHead placed after this middleware
// (r.Use(mw, middleware.GetHead)) routes a HEAD to the GET handler only once this middleware has
// looked the route up — as a HEAD, which chi has no route for — so the HEAD was taken for a request
// chi cannot route and passed through, and every HEAD ran the guarded GET's handler with no guard,
// key or not. A HEAD chi has no route for but a GET it does is now answered as any HEAD of a guarded
// GET: 405 head-not-guarded (without GetHead chi would answer 405 too), or passed with Optional and
// no key.
func TestGetHeadAfterTheMiddleware(t *testing.T) {
	for _, optional := range []bool{false, true} {
		bd := setup(t, memoryBackend, &Options{Methods: []string{http.MethodGet}, Optional: optional}, nil)
		r := chi.NewRouter()
		r.Use(bd.mw, chimw.GetHead)
		r.Get("/branch", bd.serve)
		send := func(method, key string) *httptest.ResponseRecorder {
			rq := httptest.NewRequest(method, "/branch", nil)
			if key != "" {
				rq.Header.Set(DefaultHeader, key)
			}
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, rq)
			return rec
		}
		if rec := send(http.MethodGet, "k1"); rec.Code != http.StatusCreated || bd.calls.Load() != 1 {
			t.Fatalf("optional %v: GET %d, %d runs; want 201, 1 run", optional, rec.Code, bd.calls.Load())
		}
		for _, key := range []string{"k1", "k2"} {
			rec := send(http.MethodHead, key)
			if bd.calls.Load() != 1 || rec.Code != http.StatusMethodNotAllowed || problemType(rec) != ProblemHeadNotGuarded {
				t.Fatalf("optional %v: HEAD with key %q: %d %q, %d runs; want 405 %s and the handler not run",
					optional, key, rec.Code, problemType(rec), bd.calls.Load(), ProblemHeadNotGuarded)
			}
		}
		rec := send(http.MethodHead, "")
		switch {
		case optional && (rec.Code != http.StatusCreated || bd.calls.Load() != 2):
			t.Fatalf("optional: HEAD without a key: %d, %d runs; want it passed as the GET would", rec.Code, bd.calls.Load())
		case !optional && (rec.Code != http.StatusMethodNotAllowed || bd.calls.Load() != 1):
			t.Fatalf("HEAD without a key: %d, %d runs; want 405 and the handler not run", rec.Code, bd.calls.Load())
		}
	}
}
