package httpx

import (
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestNoFingerprintKeepsTheTarget: NoFingerprint turns off the payload check, not the target's. The
// scope is the route's pattern, so with no fingerprint at all the same key sent to /orders/2/pay
// got the stored response of /orders/1/pay — the first order's payment answered for the second,
// whose handler never ran — and one sent with another query got the first query's response (found
// by a defect hunt). The path and query are still compared: another target is 422, another body
// alone is still replayed.
func TestNoFingerprintKeepsTheTarget(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, &Options{NoFingerprint: true, Noise: []string{"ts"}}, nil)
			r := chi.NewRouter()
			r.Use(bd.mw)
			r.Post("/orders/{id}/pay", bd.serve)
			for i, tc := range []struct {
				path, key, body string
				want            int
				replayed        bool
			}{
				{"/orders/1/pay", "k", `{"amount":5}`, 201, false},
				{"/orders/2/pay", "k", `{"amount":5}`, 422, false},
				{"/orders/1/pay", "k", `{"amount":7}`, 201, true},      // another body: replayed, as documented
				{"/orders/1/pay?ts=9", "k", `{"amount":5}`, 201, true}, // a noise parameter
				{"/orders/1/pay?currency=usd", "k", `{"amount":5}`, 422, false},
				{"/orders/2/pay", "k2", `{"amount":5}`, 201, false},
			} {
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, req("POST", tc.path, tc.key, tc.body))
				replayed := rec.Header().Get(ReplayedHeader) == "true"
				if rec.Code != tc.want || replayed != tc.replayed {
					t.Errorf("request %d (%s, key %s): %d replayed=%v %s, want %d replayed=%v",
						i, tc.path, tc.key, rec.Code, replayed, rec.Body, tc.want, tc.replayed)
				}
			}
			if n := bd.calls.Load(); n != 2 {
				t.Errorf("the handler ran %d times, want 2 (order 1 and order 2 once each)", n)
			}
		})
	}
}
