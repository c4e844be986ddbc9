package httpx

import (
	"errors"
	"net/http"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestQueryKeyEmptyIsInvalid: an empty key parameter (?key= or ?key) was taken for no key: 400
// missing-key, and with Optional the request ran unguarded, every retry again — while an empty
// Idempotency-Key header is 400 invalid-key and grpcx refuses an empty key. A parameter given empty
// is an invalid key now (400 invalid-key), never taken for no key; an absent one is still no key.
func TestQueryKeyEmptyIsInvalid(t *testing.T) {
	for _, q := range []string{"key=", "key", "a=1&key=&b=2", "k%65y="} {
		r := req("POST", "/?"+q, "", "")
		if _, err := Query("key")(r); !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Fatalf("%s: err %v, want one matching idemkit.ErrInvalidKey", q, err)
		}
	}
	for _, q := range []string{"", "a=", "keys=", "x=key"} {
		r := req("POST", "/?"+q, "", "")
		if got, err := Query("key")(r); err != nil || got != "" {
			t.Fatalf("%s: %q, %v; want no key", q, got, err)
		}
	}

	bd := setup(t, memoryBackend, &Options{Key: Query("key"), Optional: true}, nil)
	for _, target := range []string{"/orders?key=", "/orders?key"} {
		rec := bd.do(req("POST", target, "", `{}`))
		if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey {
			t.Fatalf("Optional, %s: %d %q, want 400 %s", target, rec.Code, problemType(rec), ProblemInvalidKey)
		}
	}
	if n := bd.calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times unguarded", n)
	}
	// The header's empty key gets the same answer.
	hd := setup(t, memoryBackend, &Options{Optional: true}, nil)
	rec := hd.do(req("POST", "/orders", "", `{}`, "Idempotency-Key", ""))
	if rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey {
		t.Fatalf("Optional, empty header: %d %q, want 400 %s", rec.Code, problemType(rec), ProblemInvalidKey)
	}
}
