package httpx

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDuplicateMemberNames is issue 11 item 16 through the middleware: a JSON body that repeats a
// member name (at any depth, however the name is escaped) gets 400 duplicate-member with a detail
// naming it, and the handler never runs; so {"a":1,"a":2} can neither replay {"a":2}'s response nor
// take its key. It holds for fingerprints and for keys derived from JSON fields, with the payload
// check off too.
func TestDuplicateMemberNames(t *testing.T) {
	tests := []struct {
		name string
		opts *Options
		// first is stored; dup repeats a name and must be refused, not replayed.
		key, first, dup, member string
	}{
		{"fingerprint", nil, "k", `{"a":2}`, `{"a":1,"a":2}`, `"a"`},
		{"fingerprint, escaped-equal names", nil, "k", `{"a":2}`, `{"a":1,"\u0061":2}`, `"a"`},
		{"fingerprint, nested object", nil, "k", `{"x":{"a":2},"y":[{"b":1}]}`, `{"x":{"a":1,"a":2},"y":[{"b":1}]}`, `"a"`},
		{"fingerprint, object in an array", nil, "k", `{"y":[{"b":1}]}`, `{"y":[{"b":0,"\u0062":1}]}`, `"b"`},
		{"fingerprint, noise name repeated", &Options{Noise: []string{"nonce"}}, "k", `{"a":1,"nonce":2}`, `{"a":1,"nonce":1,"nonce":2}`, `"nonce"`},
		{"derived key", &Options{Key: JSONFields("order.id")}, "", `{"order":{"id":"2"}}`, `{"order":{"id":"1","id":"2"}}`, `"id"`},
		{"derived key, no fingerprint", &Options{Key: JSONFields("order.id"), NoFingerprint: true}, "",
			`{"order":{"id":"2"}}`, `{"order":{"id":"1","\u0069d":"2"}}`, `"id"`},
		{"derived key, repeat outside the key's path", &Options{Key: JSONFields("order.id"), NoFingerprint: true}, "",
			`{"order":{"id":"2"},"items":[{"sku":"b"}]}`, `{"order":{"id":"2"},"items":[{"sku":"a","sku":"b"}]}`, `"sku"`},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					bd := setup(t, b, tt.opts, nil)
					if rec := bd.do(req("POST", "/orders", tt.key, tt.first)); rec.Code != 201 {
						t.Fatalf("first: %d %s", rec.Code, rec.Body)
					}
					rec := bd.do(req("POST", "/orders", tt.key, tt.dup))
					if rec.Code != 400 || problemType(rec) != ProblemDuplicateMember {
						t.Fatalf("body repeating %s: %d %v %s, want 400 %s", tt.member, rec.Code, rec.Header(), rec.Body, ProblemDuplicateMember)
					}
					var p struct{ Detail string }
					if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || !strings.Contains(p.Detail, tt.member) ||
						!strings.Contains(p.Detail, "repeats the member name") {
						t.Errorf("detail %q (%v) does not name %s", p.Detail, err, tt.member)
					}
					if n := bd.calls.Load(); n != 1 {
						t.Errorf("handler ran %d times, want 1", n)
					}
					// A fresh key is refused the same way: the body, not the key, is at fault.
					if tt.key != "" {
						if rec := bd.do(req("POST", "/orders", "fresh", tt.dup)); rec.Code != 400 || bd.calls.Load() != 1 {
							t.Errorf("fresh key: %d, %d calls", rec.Code, bd.calls.Load())
						}
					}
				})
			}
		})
	}
}

// TestDuplicateMemberNonJSON: a body that is not declared JSON is fingerprinted as raw bytes, so
// a repeated name in it is not ambiguous and is accepted.
func TestDuplicateMemberNonJSON(t *testing.T) {
	bd := setup(t, memoryBackend, nil, nil)
	text := func(body string) *http.Request {
		r := req("POST", "/orders", "k", body)
		r.Header.Set("Content-Type", "text/plain")
		return r
	}
	if rec := bd.do(text(`{"a":1,"a":2}`)); rec.Code != 201 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if rec := bd.do(text(`{"a":2}`)); rec.Code != 422 {
		t.Fatalf("another raw body with the same key: %d %s", rec.Code, rec.Body)
	}
}
