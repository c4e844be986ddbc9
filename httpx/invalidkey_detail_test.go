package httpx

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestInvalidKeyDetailNamesTheFault: every 400 invalid-key said "The idempotency key is malformed:
// send a Structured Field String such as "8e03978e-…"", whatever the key's source and fault, so a
// client whose body field ({"id":""} with JSONFields) or query parameter (?key=) was empty was told
// to send an Idempotency-Key header, which the route does not read, and got the same 400 again. The
// detail now says when the key was given empty, and gives the Structured Field hint only for a
// malformed key header (found by a defect hunt).
func TestInvalidKeyDetailNamesTheFault(t *testing.T) {
	const sfHint = "Structured Field String"
	for _, tc := range []struct {
		name       string
		key        KeySource
		path, body string
		hdr        []string
		want, not  string
	}{
		{"empty header", nil, "/orders", `{}`, []string{DefaultHeader, ""}, "empty", sfHint},
		{"empty sf-string", nil, "/orders", `{}`, []string{DefaultHeader, `""`}, "empty", sfHint},
		{"malformed header", nil, "/orders", `{}`, []string{DefaultHeader, `"unterminated`}, sfHint, "empty"},
		{"header list", nil, "/orders", `{}`, []string{DefaultHeader, `"a", "b"`}, "malformed", "empty"},
		{"empty JSON field", JSONFields("id"), "/orders", `{"id":""}`, nil, "empty", sfHint},
		{"empty query parameter", Query("key"), "/orders?key=", `{}`, nil, "empty", sfHint},
		{"malformed query parameter", Query("key"), "/orders?key=%zz", `{}`, nil, "malformed", sfHint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, memoryBackend, &Options{Key: tc.key}, nil)
			rec := bd.do(req(http.MethodPost, tc.path, "", tc.body, tc.hdr...))
			var p struct{ Detail string }
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey ||
				!strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, tc.not) {
				t.Fatalf("%d %s, detail %q: want 400 invalid-key, a detail saying %q and not %q", rec.Code, problemType(rec), p.Detail, tc.want, tc.not)
			}
		})
	}
}
