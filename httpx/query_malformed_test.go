package httpx

import (
	"errors"
	"net/http"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestQueryKeyMalformedIsInvalid: Query read the key with url.URL.Query, which drops a pair it cannot
// parse (a bad percent escape, a semicolon), so a key the client did send was taken for no key: 400
// missing-key, and with Optional the request ran unguarded, every retry again. Such a parameter is an
// invalid key now (400 invalid-key), as a malformed Idempotency-Key header is; malformed pairs of
// other parameters are no concern of the key (found by a defect hunt).
func TestQueryKeyMalformedIsInvalid(t *testing.T) {
	for _, q := range []string{"key=abc%zz", "key=abc;def", "a=1&key=%", "k%65y=a;b"} {
		r := req("POST", "/?"+q, "", "")
		if _, err := Query("key")(r); !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Fatalf("%s: err %v, want one matching idemkit.ErrInvalidKey", q, err)
		}
	}
	for q, want := range map[string]string{"x=%zz&key=k-1": "k-1", "x=1;y=2&key=k-2": "k-2", "k%65y=k-3": "k-3", "x=%zz": ""} {
		r := req("POST", "/?"+q, "", "")
		if got, err := Query("key")(r); err != nil || got != want {
			t.Fatalf("%s: %q, %v; want %q", q, got, err, want)
		}
	}

	bd := setup(t, memoryBackend, &Options{Key: Query("key"), Optional: true}, nil)
	rec := bd.do(req("POST", "/orders?key=abc%zz", "", `{}`))
	if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey {
		t.Fatalf("Optional, malformed key: %d %q, want 400 %s", rec.Code, problemType(rec), ProblemInvalidKey)
	}
	if n := bd.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times unguarded", n)
	}
}
