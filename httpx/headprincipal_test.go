package httpx

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHeadOfGetAsksThePrincipal: with Optional, a HEAD without a key routed to a handler whose GET
// is guarded passes "as the GET would" — but the GET asks Options.Principal first and is refused
// 403 when it fails, while the HEAD ran the handler for a caller the Principal refused. The HEAD
// now gets the GET's 403; a caller the Principal accepts still passes.
func TestHeadOfGetAsksThePrincipal(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{Methods: []string{http.MethodGet}, Optional: true,
		Principal: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" {
				return u, nil
			}
			return "", errors.New("no caller")
		}}, nil)
	mux := http.NewServeMux()
	mux.Handle("GET /report", bd.handler)
	send := func(method, user string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/report", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		return rec
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if rec := send(method, ""); rec.Code != http.StatusForbidden || problemType(rec) != ProblemPrincipal {
			t.Fatalf("%s by a caller the Principal refuses: %d %q; want 403 %s", method, rec.Code, problemType(rec), ProblemPrincipal)
		}
	}
	if n := bd.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times for refused callers", n)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if rec := send(method, "alice"); rec.Code != http.StatusCreated {
			t.Fatalf("%s by alice without a key: %d; want the handler's 201", method, rec.Code)
		}
	}
}
