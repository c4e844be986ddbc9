package httpx

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestRoutePatternChangeIsANewScope pins what the README's Scope row says: DefaultScope is the route
// pattern, so a deploy that edits it (a parameter renamed) starts a new scope, and a retry of a key
// finished before the deploy runs the handler again, unless Options.Scope names the operation
// stably (the README said nothing of it; found by a defect hunt).
func TestRoutePatternChangeIsANewScope(t *testing.T) {
	for _, stable := range []bool{false, true} {
		store := memory.NewStore()
		var runs atomic.Int32
		deploy := func(pattern string) http.Handler {
			g, err := idemkit.New(store, nil)
			if err != nil {
				t.Fatal(err)
			}
			var opts *Options
			if stable {
				opts = &Options{Scope: func(*http.Request) string { return "pay-order" }}
			}
			r := chi.NewRouter()
			r.Use(Middleware(g, opts))
			r.Post(pattern, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			})
			return r
		}
		for _, h := range []http.Handler{deploy("/orders/{id}/pay"), deploy("/orders/{orderID}/pay")} {
			rq := httptest.NewRequest(http.MethodPost, "/orders/7/pay", nil)
			rq.Header.Set(DefaultHeader, `"k"`)
			h.ServeHTTP(httptest.NewRecorder(), rq)
		}
		if want := map[bool]int32{false: 2, true: 1}[stable]; runs.Load() != want {
			t.Errorf("stable scope %v: %d runs across the deploy, want %d", stable, runs.Load(), want)
		}
	}
}
