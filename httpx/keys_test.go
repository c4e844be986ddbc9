package httpx

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func TestKeySources(t *testing.T) {
	withPath := func(r *http.Request, name, value string) *http.Request { r.SetPathValue(name, value); return r }
	custom := KeySource(func(r *http.Request) (string, error) { return r.Header.Get("X-Order"), nil })
	failing := KeySource(func(*http.Request) (string, error) { return "", errors.New("custom failure") })
	long := strings.Repeat("z", 200)
	tests := []struct {
		name    string
		src     KeySource
		r       *http.Request
		want    string
		wantErr error
	}{
		{"header sf-string", Header(DefaultHeader), req("POST", "/", `"abc-1"`, ""), "abc-1", nil},
		{"header sf-string with escapes and params", Header(DefaultHeader), req("POST", "/", `"a\"b\\c";v=1;x`, ""), `a"b\c`, nil},
		{"header bare token", Header(DefaultHeader), req("POST", "/", `8e03978e-40d5-43e8-bc93-6894a57f9324`, ""), "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"header missing", Header(DefaultHeader), req("POST", "/", "", ""), "", nil},
		{"header empty string", Header(DefaultHeader), req("POST", "/", `""`, ""), "", idemkit.ErrInvalidKey},
		{"header list", Header(DefaultHeader), req("POST", "/", `"a", "b"`, ""), "", idemkit.ErrInvalidKey},
		{"header twice", Header(DefaultHeader), req("POST", "/", "a", "", "Idempotency-Key", "a"), "", idemkit.ErrInvalidKey},
		{"query", Query("key"), req("POST", "/?key=q-1", "", ""), "q-1", nil},
		{"query missing", Query("key"), req("POST", "/?other=1", "", ""), "", nil},
		{"query twice", Query("key"), req("POST", "/?key=a&key=b", "", ""), "", idemkit.ErrInvalidKey},
		{"path value (ServeMux)", URLParam("id"), withPath(req("POST", "/orders/7", "", ""), "id", "7"), "7", nil},
		{"json string field", JSONFields("order.id"), req("POST", "/", "", `{"order":{"id":"o-1"}}`), "o-1", nil},
		{"json number field normalised", JSONFields("n"), req("POST", "/", "", `{"n":12.50e1}`), "125", nil},
		{"json bool field", JSONFields("ok"), req("POST", "/", "", `{"ok":true}`), "true", nil},
		{"json array index", JSONFields("items.1.sku"), req("POST", "/", "", `{"items":[{"sku":"a"},{"sku":"b"}]}`), "b", nil},
		{"json object field canonical", JSONFields("order"),
			req("POST", "/", "", `{"order":{"z":1,"a":[1.0,{"nonce":"x","b":2}]}}`), `{"a":[1,{"b":2,"nonce":"x"}],"z":1}`, nil},
		{"json several fields", JSONFields("user", "order.id"), req("POST", "/", "", `{"user":"u","order":{"id":7}}`), `["u","7"]`, nil},
		{"json long value hashed", JSONFields("v"), req("POST", "/", "", `{"v":"`+long+`"}`), idemkit.HashedForm(long), nil},
		{"json control characters hashed", JSONFields("v"), req("POST", "/", "", `{"v":"a\nb"}`), idemkit.HashedForm("a\nb"), nil},
		{"json field missing", JSONFields("order.id"), req("POST", "/", "", `{"order":{}}`), "", nil},
		{"json field null", JSONFields("id"), req("POST", "/", "", `{"id":null}`), "", nil},
		{"json field empty string", JSONFields("id"), req("POST", "/", "", `{"id":""}`), "", idemkit.ErrInvalidKey},
		{"json one of several empty", JSONFields("a", "b"), req("POST", "/", "", `{"a":1,"b":""}`), "", idemkit.ErrInvalidKey},
		{"json one of several missing", JSONFields("a", "b"), req("POST", "/", "", `{"a":1}`), "", nil},
		{"json body not JSON", JSONFields("id"), req("POST", "/", "", `id=1`), "", nil},
		{"json body empty", JSONFields("id"), req("POST", "/", "", ""), "", nil},
		{"first of: header wins", FirstOf(Header(DefaultHeader), Query("key")), req("POST", "/?key=q", "h", ""), "h", nil},
		{"first of: falls back", FirstOf(Header(DefaultHeader), Query("key")), req("POST", "/?key=q", "", ""), "q", nil},
		{"first of: error stops", FirstOf(Header(DefaultHeader), Query("key")), req("POST", "/?key=q", `"bad`, ""), "", idemkit.ErrInvalidKey},
		{"first of: none", FirstOf(Header(DefaultHeader), Query("key")), req("POST", "/", "", ""), "", nil},
		{"all", All(Query("shop"), JSONFields("order.id")), req("POST", "/?shop=s1", "", `{"order":{"id":"o-1"}}`), `["s1","o-1"]`, nil},
		{"all: one missing", All(Query("shop"), JSONFields("order.id")), req("POST", "/", "", `{"order":{"id":"o-1"}}`), "", nil},
		{"custom function", custom, req("POST", "/", "", "", "X-Order", "o-9"), "o-9", nil},
		{"custom function error", FirstOf(custom, failing), req("POST", "/", "", ""), "", errors.New("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.src(tt.r)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != nil && err == nil:
				t.Fatalf("key %q, want an error", got)
			case tt.wantErr != nil && tt.wantErr.Error() != "" && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("key %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKeySourceLeavesBody checks a key source outside the middleware puts the body back.
func TestKeySourceLeavesBody(t *testing.T) {
	r := req("POST", "/", "", `{"id":"x"}`)
	if k, err := JSONFields("id")(r); err != nil || k != "x" {
		t.Fatalf("key %q, %v", k, err)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != `{"id":"x"}` {
		t.Fatalf("body after the key source: %q", b)
	}
}

// TestKeySourcesThroughMiddleware runs each source end to end: the duplicate replays, another key
// runs, the handler reads the whole body.
func TestKeySourcesThroughMiddleware(t *testing.T) {
	type reqs = func() (first, dup, next *http.Request)
	tests := []struct {
		name string
		opts *Options
		reqs reqs
	}{
		{"json fields without noise", &Options{Key: JSONFields("order"), Noise: []string{"sentAt"}}, func() (a, b, c *http.Request) {
			return req("POST", "/orders", "", `{"order":{"id":"o-1","sentAt":1}}`),
				req("POST", "/orders", "", `{"order":{"sentAt":2,"id":"o-1"}}`),
				req("POST", "/orders", "", `{"order":{"id":"o-2","sentAt":3}}`)
		}},
		{"query", &Options{Key: Query("rid")}, func() (a, b, c *http.Request) {
			return req("POST", "/orders?rid=1", "", `{}`), req("POST", "/orders?rid=1", "", `{}`), req("POST", "/orders?rid=2", "", `{}`)
		}},
		{"header or query", &Options{Key: FirstOf(Header(DefaultHeader), Query("rid"))}, func() (a, b, c *http.Request) {
			return req("POST", "/orders", "1", `{}`), req("POST", "/orders", "1", `{}`), req("POST", "/orders?rid=2", "", `{}`)
		}},
		{"all", &Options{Key: All(Header("X-Shop"), JSONFields("n"))}, func() (a, b, c *http.Request) {
			return req("POST", "/orders", "", `{"n":1}`, "X-Shop", "s"), req("POST", "/orders", "", `{"n":1.0}`, "X-Shop", "s"),
				req("POST", "/orders", "", `{"n":1}`, "X-Shop", "t")
		}},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					bd := setup(t, b, tt.opts, nil)
					r1, r2, r3 := tt.reqs()
					first := bd.do(r1)
					if first.Code != 201 || !strings.Contains(first.Body.String(), `"got":{`) {
						t.Fatalf("first: %d %s", first.Code, first.Body)
					}
					dup := bd.do(r2)
					if dup.Code != 201 || dup.Header().Get(ReplayedHeader) != "true" || dup.Body.String() != first.Body.String() {
						t.Fatalf("duplicate: %d %v %s", dup.Code, dup.Header(), dup.Body)
					}
					next := bd.do(r3)
					if next.Code != 201 || next.Header().Get(ReplayedHeader) != "" || bd.calls.Load() != 2 {
						t.Fatalf("next key: %d, %d calls", next.Code, bd.calls.Load())
					}
				})
			}
		})
	}
}

// TestPrincipalScoping: two principals with one key run independently and each replays its own.
func TestPrincipalScoping(t *testing.T) {
	opts := &Options{Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, opts, nil)
			alice := bd.do(req("POST", "/orders", "k", `{}`, "X-User", "alice"))
			bob := bd.do(req("POST", "/orders", "k", `{}`, "X-User", "bob"))
			if alice.Code != 201 || bob.Code != 201 || bd.calls.Load() != 2 || alice.Body.String() == bob.Body.String() {
				t.Fatalf("alice %d %s, bob %d %s, %d calls", alice.Code, alice.Body, bob.Code, bob.Body, bd.calls.Load())
			}
			for _, u := range []struct {
				user string
				orig *httptest.ResponseRecorder
			}{{"alice", alice}, {"bob", bob}} {
				rec := bd.do(req("POST", "/orders", "k", `{}`, "X-User", u.user))
				if rec.Header().Get(ReplayedHeader) != "true" || rec.Body.String() != u.orig.Body.String() {
					t.Fatalf("%s's replay: %s, want %s", u.user, rec.Body, u.orig.Body)
				}
			}
			// An anonymous caller cannot forge another principal's stored key.
			anon := bd.do(req("POST", "/orders", "5:alice:k", `{}`))
			if anon.Code != 201 || anon.Header().Get(ReplayedHeader) != "" || bd.calls.Load() != 3 {
				t.Fatalf("anonymous caller with a forged key: %d replayed=%q, %d calls", anon.Code, anon.Header().Get(ReplayedHeader), bd.calls.Load())
			}
		})
	}
}
