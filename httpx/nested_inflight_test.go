package httpx

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestInnerInFlightNotStoredByOuter: a middleware nested in another that guards a different key
// (the Idempotency-Key on the router, a body field on the route) answered 409 in-flight while a
// request with another Idempotency-Key held that field's key; the outer middleware stored that 409
// as its key's response (409 is a stored status), so every retry was replayed the in-flight answer,
// long after the holder had finished. An in-flight answer is transient: the outer one does not
// store it, and the retry runs.
func TestInnerInFlightNotStoredByOuter(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.With(Middleware(bd.guard, &Options{Key: JSONFields("order")})).Post("/pay", bd.serve)
	done := make(chan int)
	go func() {
		done <- serve(r, req("POST", "/pay", "k-a", `{"order":"o-1"}`, "X-Test-Block", "1")).Code
	}()
	<-bd.entered
	rec := serve(r, req("POST", "/pay", "k-b", `{"order":"o-1"}`))
	if rec.Code != http.StatusConflict || problemType(rec) != ProblemInFlight {
		t.Fatalf("while o-1 runs: %d %s, want 409 in-flight", rec.Code, rec.Body)
	}
	bd.unblock()
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("holder: %d, want 201", code)
	}
	rec = serve(r, req("POST", "/pay", "k-b", `{"order":"o-1"}`))
	if rec.Code == http.StatusConflict {
		t.Fatalf("retry of k-b after o-1 finished: %d %s (replayed %q): the in-flight answer was stored", rec.Code, rec.Body, rec.Header().Get(ReplayedHeader))
	}
	if rec.Code != http.StatusCreated {
		t.Fatalf("retry of k-b: %d %s, want o-1's 201", rec.Code, rec.Body)
	}
}
