package httpx

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestHeadOfAGuardedGetRunsNothing: net/http's ServeMux routes HEAD to a GET pattern's handler (and
// chi's middleware.GetHead does the same). On a route whose GET is guarded and whose HEAD is not
// listed in Methods, every HEAD ran the handler with no guard at all: a GET-guarded DTM branch ran
// its business again for each HEAD, the key's GET answer notwithstanding (found by a defect hunt).
// Such a HEAD is now refused with 405 and never reaches the handler; with Optional and no key it
// passes, as the GET would. HEAD listed in Methods keeps its own guard.
func TestHeadOfAGuardedGetRunsNothing(t *testing.T) {
	newServer := func(t *testing.T, opts *Options) (http.Handler, *atomic.Int32) {
		t.Helper()
		g, err := idemkit.New(memory.NewStore(), nil)
		if err != nil {
			t.Fatal(err)
		}
		mw, err := New(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		mux := http.NewServeMux()
		mux.Handle("GET /branch", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
		})))
		return mux, &runs
	}
	send := func(h http.Handler, method, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/branch", nil)
		if key != "" {
			r.Header.Set(DefaultHeader, `"`+key+`"`)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}

	t.Run("refused", func(t *testing.T) {
		h, runs := newServer(t, &Options{Methods: []string{http.MethodGet}})
		if rec := send(h, http.MethodGet, "k1"); rec.Code != http.StatusOK || runs.Load() != 1 {
			t.Fatalf("GET: %d, %d runs; want 200, 1 run", rec.Code, runs.Load())
		}
		for _, key := range []string{"k1", "k2", ""} {
			rec := send(h, http.MethodHead, key)
			if runs.Load() != 1 {
				t.Fatalf("HEAD with key %q ran the handler unguarded (%d runs)", key, runs.Load())
			}
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodGet || problemType(rec) != ProblemHeadNotGuarded {
				t.Fatalf("HEAD with key %q: %d, Allow %q, problem %q; want 405, Allow GET, %s", key, rec.Code,
					rec.Header().Get("Allow"), problemType(rec), ProblemHeadNotGuarded)
			}
		}
		if rec := send(h, http.MethodGet, "k1"); rec.Code != http.StatusOK || runs.Load() != 1 || rec.Header().Get(ReplayedHeader) == "" {
			t.Fatalf("GET retry: %d, %d runs, replayed %q; want the replay", rec.Code, runs.Load(), rec.Header().Get(ReplayedHeader))
		}
	})
	t.Run("optional without a key passes as GET would", func(t *testing.T) {
		h, runs := newServer(t, &Options{Methods: []string{http.MethodGet}, Optional: true})
		if rec := send(h, http.MethodHead, ""); rec.Code != http.StatusOK || runs.Load() != 1 {
			t.Fatalf("HEAD without a key, Optional: %d, %d runs; want 200, 1 run", rec.Code, runs.Load())
		}
		if rec := send(h, http.MethodHead, "k"); rec.Code != http.StatusMethodNotAllowed || runs.Load() != 1 {
			t.Fatalf("HEAD with a key, Optional: %d, %d runs; want 405, no run", rec.Code, runs.Load())
		}
	})
	t.Run("listed", func(t *testing.T) {
		h, runs := newServer(t, &Options{Methods: []string{http.MethodGet, http.MethodHead}})
		for range 2 {
			if rec := send(h, http.MethodHead, "k"); rec.Code != http.StatusOK {
				t.Fatalf("listed HEAD: %d; want 200", rec.Code)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("listed HEAD ran %d times for one key; want 1", runs.Load())
		}
	})
	t.Run("not guarding GET", func(t *testing.T) {
		h, runs := newServer(t, nil) // POST and PATCH: GET and HEAD pass untouched
		if rec := send(h, http.MethodHead, ""); rec.Code != http.StatusOK || runs.Load() != 1 {
			t.Fatalf("HEAD on a route whose GET is not guarded: %d, %d runs; want 200, 1 run", rec.Code, runs.Load())
		}
	})
}
