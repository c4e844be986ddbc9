package httpx

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestMissingKeyDetailNamesNoHeaderTheRouteIgnores: the 400 missing-key detail said "This operation
// requires an idempotency key (Idempotency-Key header by default)" on every route, also where the
// key comes from elsewhere (a JSON body field, a query or path parameter, a token), so a client
// following it added a header the route does not read and got the same 400 again. The header is
// named only when it is where the key comes from (found by a defect hunt).
func TestMissingKeyDetailNamesNoHeaderTheRouteIgnores(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key        KeySource
		headerHint bool
	}{
		{"default source", nil, true},
		{"JSON field", JSONFields("id"), false},
		{"query parameter", Query("key"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, memoryBackend, &Options{Key: tc.key}, nil)
			rec := bd.do(req(http.MethodPost, "/orders", "", `{"amount":1}`))
			var p struct{ Detail string }
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemMissingKey ||
				strings.Contains(p.Detail, DefaultHeader) != tc.headerHint {
				t.Fatalf("%d %s, detail %q: want 400 missing-key, naming the %s header: %v", rec.Code, problemType(rec), p.Detail, DefaultHeader, tc.headerHint)
			}
		})
	}
}
