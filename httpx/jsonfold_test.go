package httpx

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestJSONFieldsKeyNameInAnotherCase: a key field named in another case than its path ({"ID":…} for
// JSONFields("id")) is one encoding/json decodes into the handler's `json:"id"` field, as it does the
// last of several names differing only in case. Taken for "no key", it let such a request run
// unguarded on an Optional route (every retry ran the handler again); taken as given, a body with
// both "id" and "ID" would be keyed by one and handled by the other. Both are refused, 400
// invalid-key naming the field, and the handler never runs.
func TestJSONFieldsKeyNameInAnotherCase(t *testing.T) {
	bodies := []struct{ name, body string }{
		{"upper case", `{"ID":"o-1","amount":5}`},
		{"mixed case, nested", `{"Order":{"id":"o-1"},"amount":5}`},
		{"Kelvin sign folds to k", `{"\u212aey":"o-1","amount":5}`},
		{"exact and another case", `{"id":"o-1","ID":"o-2","amount":5}`},
	}
	paths := map[string]string{"upper case": "id", "mixed case, nested": "order.id", "Kelvin sign folds to k": "key", "exact and another case": "id"}
	for _, tt := range bodies {
		t.Run(tt.name, func(t *testing.T) {
			ran := 0
			h := Middleware(memoryGuard(t, nil), &Options{Key: JSONFields(paths[tt.name]), Optional: true})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					var v map[string]any
					_ = json.NewDecoder(r.Body).Decode(&v)
					ran++
					w.WriteHeader(http.StatusCreated)
				}))
			for i := range 2 {
				rec := serve(h, req("POST", "/orders", "", tt.body))
				if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "invalid-key") ||
					!strings.Contains(rec.Body.String(), "case") {
					t.Fatalf("send %d: %d %s (handler ran %d times)", i+1, rec.Code, rec.Body, ran)
				}
			}
			if ran != 0 {
				t.Fatalf("handler ran %d times", ran)
			}
		})
	}
	// The exact name alone, and names that differ from the path by more than case, are as before.
	ran := 0
	h := Middleware(memoryGuard(t, nil), &Options{Key: JSONFields("id"), Optional: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++; w.WriteHeader(http.StatusCreated) }))
	for range 2 {
		if rec := serve(h, req("POST", "/orders", "", `{"id":"o-1","idx":"x","i_d":"y"}`)); rec.Code != http.StatusCreated {
			t.Fatalf("exact name: %d %s", rec.Code, rec.Body)
		}
	}
	if ran != 1 {
		t.Fatalf("exact name: handler ran %d times, want 1 (the second a replay)", ran)
	}
	if rec := serve(h, req("POST", "/orders", "", `{"idx":"x"}`)); rec.Code != http.StatusCreated || ran != 2 {
		t.Fatalf("no key field, Optional: %d (ran %d)", rec.Code, ran)
	}
}
