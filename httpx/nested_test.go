package httpx

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestNestedMiddlewareSameCall: the middleware on the router (r.Use) and again on a route (r.With,
// as the README suggests for DTM branch routes, with Options.DTM) guarded the same call twice: the
// inner one met the outer's claim and answered 409 in-flight (425 under DTM, "ongoing"), the handler
// never ran, and the outer stored that 409 as the response, replayed to every retry: the key was
// stuck. The inner middleware now sees the outer's claim on the same Guard, scope and key, and lets
// the handler run under it (found by a defect hunt).
func TestNestedMiddlewareSameCall(t *testing.T) {
	for _, inner := range []*Options{nil, {DTM: true}} {
		bd := setup(t, memoryBackend, nil, nil)
		r := chi.NewRouter()
		r.Use(bd.mw)
		r.With(Middleware(bd.guard, inner)).Post("/orders", bd.serve)
		for i := range 2 {
			rec := serve(r, req("POST", "/orders", "k-nested", `{"a":1}`))
			if rec.Code != http.StatusCreated || (i > 0) != (rec.Header().Get(ReplayedHeader) == "true") {
				t.Fatalf("inner %+v, request %d: %d %s, replayed %q; want 201 (replayed the second time)",
					inner, i+1, rec.Code, rec.Body, rec.Header().Get(ReplayedHeader))
			}
		}
		if n := bd.calls.Load(); n != 1 {
			t.Fatalf("inner %+v: handler ran %d times, want 1", inner, n)
		}
	}
}

// TestThriceNestedMiddlewareSameCall: the middleware on the router, a group and the route: the one
// in the middle ran the handler under the outer one's claim, but the innermost did not see that
// claim and met it in flight (found by a defect hunt).
func TestThriceNestedMiddlewareSameCall(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.Group(func(r chi.Router) {
		r.Use(Middleware(bd.guard, nil))
		r.With(Middleware(bd.guard, &Options{DTM: true})).Post("/orders", bd.serve)
	})
	if rec := serve(r, req("POST", "/orders", "k-thrice", `{"a":1}`)); rec.Code != http.StatusCreated {
		t.Fatalf("%d %s, want 201", rec.Code, rec.Body)
	}
	if n := bd.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
