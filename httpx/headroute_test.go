package httpx

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
)

// TestHeadRouteWithoutGetPasses: on a chi router whose GET is guarded (r.Use, Methods listing GET
// but not HEAD), every HEAD was taken for one that reaches a GET handler unguarded, and refused with
// 405 head-not-guarded, Allow: GET — also a HEAD chi routes to a HEAD endpoint of its own on a path
// with no GET route at all (r.Head("/ping", …)): the endpoint could not be reached, and the answer
// offered a GET the path does not have (found by a defect hunt). A HEAD chi routes to an endpoint of
// its own, where chi routes no GET, now passes to it, unguarded as HEAD is not listed; a HEAD on a
// path with a GET route is refused as before.
func TestHeadRouteWithoutGetPasses(t *testing.T) {
	for _, getHead := range []bool{false, true} {
		bd := setup(t, memoryBackend, &Options{Methods: []string{http.MethodGet, http.MethodPost}}, nil)
		var heads atomic.Int32
		r := chi.NewRouter()
		r.Use(bd.mw)
		if getHead {
			r.Use(chimw.GetHead)
		}
		r.Get("/branch", bd.serve)
		r.Head("/ping", func(w http.ResponseWriter, r *http.Request) {
			heads.Add(1)
			w.Header().Set("X-Ping", "pong")
		})
		send := func(path, key string) *httptest.ResponseRecorder {
			rq := httptest.NewRequest(http.MethodHead, path, nil)
			if key != "" {
				rq.Header.Set(DefaultHeader, key)
			}
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, rq)
			return rec
		}
		for i, key := range []string{"", "k1"} {
			rec := send("/ping", key)
			if rec.Code != http.StatusOK || rec.Header().Get("X-Ping") != "pong" || heads.Load() != int32(i+1) {
				t.Errorf("GetHead %v: HEAD /ping with key %q: %d, Allow %q, problem %q, %d runs; want its own HEAD handler's 200",
					getHead, key, rec.Code, rec.Header().Get("Allow"), problemType(rec), heads.Load())
			}
			if rec := send("/branch", key); rec.Code != http.StatusMethodNotAllowed || problemType(rec) != ProblemHeadNotGuarded || bd.calls.Load() != 0 {
				t.Errorf("GetHead %v: HEAD /branch with key %q: %d %q, %d runs; want 405 %s, the GET handler not run",
					getHead, key, rec.Code, problemType(rec), bd.calls.Load(), ProblemHeadNotGuarded)
			}
		}
	}
}
