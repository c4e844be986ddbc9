package httpx

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestHeadEndpointBesideGuardedGet: on a chi router whose GET is guarded (Methods listing GET but
// not HEAD), a HEAD chi routes to a HEAD handler of its own registered beside the GET
// (r.Get("/report", …) and r.Head("/report", …)) was refused with 405 head-not-guarded, as if it
// reached the GET's handler unguarded: the HEAD endpoint could never be reached (found by a defect
// hunt). It now passes to its own handler, unguarded as HEAD is not listed; a HEAD whose handler is
// the GET's (a route for every method, r.HandleFunc) is refused as before.
func TestHeadEndpointBesideGuardedGet(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Methods: []string{http.MethodGet, http.MethodPost}}, nil)
	var heads atomic.Int32
	head := func(w http.ResponseWriter, r *http.Request) {
		heads.Add(1)
		w.Header().Set("X-Head", "own")
	}
	noop := func(next http.Handler) http.Handler { return next }
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.Get("/report", bd.serve)
	r.Head("/report", head)
	r.With(noop).Get("/with", bd.serve)
	r.With(noop).Head("/with", head)
	r.Route("/api", func(r chi.Router) {
		r.Get("/orders/{id}", bd.serve)
		r.Head("/orders/{id}", head)
	})
	r.HandleFunc("/all", bd.serve)
	r.Get("/same", bd.serve)
	r.Head("/same", bd.serve)
	send := func(path, key string) *httptest.ResponseRecorder {
		rq := httptest.NewRequest(http.MethodHead, path, nil)
		if key != "" {
			rq.Header.Set(DefaultHeader, key)
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, rq)
		return rec
	}
	for _, key := range []string{"", "k1"} {
		for _, path := range []string{"/report", "/with", "/api/orders/7"} {
			before := heads.Load()
			if rec := send(path, key); rec.Code != http.StatusOK || rec.Header().Get("X-Head") != "own" || heads.Load() != before+1 {
				t.Errorf("HEAD %s with key %q: %d, problem %q; want its own HEAD handler's 200", path, key, rec.Code, problemType(rec))
			}
		}
		for _, path := range []string{"/all", "/same"} {
			if rec := send(path, key); rec.Code != http.StatusMethodNotAllowed || problemType(rec) != ProblemHeadNotGuarded || bd.calls.Load() != 0 {
				t.Errorf("HEAD %s with key %q: %d %q, %d runs; want 405 %s, the GET's handler not run",
					path, key, rec.Code, problemType(rec), bd.calls.Load(), ProblemHeadNotGuarded)
			}
		}
	}
}
