package httpx

import (
	"context"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestNestedMiddlewareOneToken: the middleware taking its key from one-time tokens on the router
// (r.Use) and again on a route (r.With): the outer one consumed the request's token and claimed the
// call, and the inner one, reading the key again to find the call it is nested in, consumed the
// token a second time and answered 409 token-invalid; the handler never ran and the outer one
// stored that 409. A token is consumed once per request however many middlewares read it.
func TestNestedMiddlewareOneToken(t *testing.T) {
	tokens, err := NewTokens(NewMemoryTokenStore(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{Key: tokens.Key()}
	bd := setup(t, memoryBackend, opts, nil)
	r := chi.NewRouter()
	r.Use(bd.mw)
	r.With(Middleware(bd.guard, &Options{Key: tokens.Key(), DTM: true})).Post("/orders", bd.serve)
	tok, err := tokens.Issue(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(r, req("POST", "/orders", "", `{"a":1}`, DefaultTokenHeader, tok.Token))
	if rec.Code != http.StatusCreated || bd.calls.Load() != 1 {
		t.Fatalf("first use: %d %s, handler ran %d times; want 201 from one run", rec.Code, rec.Body, bd.calls.Load())
	}
	rec = serve(r, req("POST", "/orders", "", `{"a":1}`, DefaultTokenHeader, tok.Token))
	if rec.Code != http.StatusConflict || problemType(rec) != ProblemTokenInvalid || bd.calls.Load() != 1 {
		t.Fatalf("second use: %d %s, handler ran %d times; want 409 token-invalid, one run", rec.Code, rec.Body, bd.calls.Load())
	}
}
