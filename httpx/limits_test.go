package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func memoryGuard(t *testing.T, opts *idemkit.Options) *idemkit.Guard {
	t.Helper()
	st, lk := memoryBackend.new(t)
	if opts == nil {
		opts = &idemkit.Options{}
	}
	opts.Locker = lk
	g, err := idemkit.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestMaxKeyLenBoundsClientKeysOnly: MaxKeyLen bounds the keys clients send. A one-time token's key
// ("token:" and a 64-character hash) and a hashed payload key are the middleware's own and longer than
// a MaxKeyLen of 64: they are accepted.
func TestMaxKeyLenBoundsClientKeysOnly(t *testing.T) {
	tokens, err := NewTokens(NewMemoryTokenStore(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	t.Run("token", func(t *testing.T) {
		h := Middleware(memoryGuard(t, nil), &Options{MaxKeyLen: 64, Key: tokens.Key()})(ok)
		tok, err := tokens.Issue(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		if rec := serve(h, req("POST", "/orders", "", `{}`, DefaultTokenHeader, tok.Token)); rec.Code != http.StatusCreated {
			t.Fatalf("a %d-byte token under MaxKeyLen 64: %d %s", len(tok.Token), rec.Code, rec.Body.String())
		}
	})
	t.Run("JSONFields", func(t *testing.T) {
		h := Middleware(memoryGuard(t, nil), &Options{MaxKeyLen: 64, Key: JSONFields("order.id")})(ok)
		if rec := serve(h, req("POST", "/orders", "", `{"order":{"id":"`+strings.Repeat("9", 200)+`"}}`)); rec.Code != http.StatusCreated {
			t.Fatalf("a hashed payload key under MaxKeyLen 64: %d %s", rec.Code, rec.Body.String())
		}
	})
	t.Run("client key", func(t *testing.T) {
		h := Middleware(memoryGuard(t, nil), &Options{MaxKeyLen: 64})(ok)
		if rec := serve(h, req("POST", "/orders", strings.Repeat("k", 65), `{}`)); rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey {
			t.Fatalf("a 65-byte client key under MaxKeyLen 64: %d %s", rec.Code, rec.Body.String())
		}
	})
}

// TestMaxKeyLenWithinTheGuards: a client key the options accept must not be one the Guard refuses
// (a 400 nobody can explain). New refuses a MaxKeyLen above the Guard's; by default the middleware
// takes the Guard's when it is smaller; a scope (the route) longer than the Guard's limit is hashed.
func TestMaxKeyLenWithinTheGuards(t *testing.T) {
	if _, err := New(memoryGuard(t, nil), &Options{MaxKeyLen: 400}); err == nil {
		t.Fatal("New accepted MaxKeyLen 400 over a Guard limited to 255")
	}
	g := memoryGuard(t, &idemkit.Options{MaxKeyLen: 100})
	h := Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	if rec := serve(h, req("POST", "/orders", strings.Repeat("k", 101), `{}`)); rec.Code != http.StatusBadRequest || problemType(rec) != ProblemInvalidKey {
		t.Fatalf("a 101-byte key over a Guard limited to 100: %d %s", rec.Code, rec.Body.String())
	}
	if rec := serve(h, req("POST", "/orders/"+strings.Repeat("a", 100)+"/pay", "k", `{}`)); rec.Code != http.StatusCreated {
		t.Fatalf("a short key on a route longer than the Guard's limit: %d %s", rec.Code, rec.Body.String())
	}
}

// TestDTMDuplicateOfSuccessIsNeverConflict: on a DTM branch route DTM reads 409 as FAILURE and
// would roll back a branch that succeeded. A redelivery of a succeeded branch that cannot be
// replayed (Duplicates: Reject, or a response too large to store) is answered 200 SUCCESS.
func TestDTMDuplicateOfSuccessIsNeverConflict(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		size int
	}{
		{"reject", Options{DTM: true, Duplicates: Reject}, 10},
		{"large response", Options{DTM: true, MaxResponseBytes: 64}, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			opts := c.opts
			h := Middleware(memoryGuard(t, nil), &opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"` + strings.Repeat(" ", c.size) + `}`))
			}))
			first := serve(h, req("POST", "/branch", "gid-1-01-action", `{"amount":30}`))
			again := serve(h, req("POST", "/branch", "gid-1-01-action", `{"amount":30}`))
			if first.Code != http.StatusOK || calls != 1 {
				t.Fatalf("first: %d, %d calls", first.Code, calls)
			}
			if again.Code != http.StatusOK || again.Header().Get(ReplayedHeader) != "true" || strings.Contains(again.Body.String(), "FAILURE") || calls != 1 {
				t.Fatalf("redelivery of a succeeded branch: %d %s (%d calls); want 200 SUCCESS, not run again", again.Code, again.Body.String(), calls)
			}
		})
	}
}

// A client key within the middleware's MaxKeyLen (capped at the Guard's) must not be refused by the
// Guard once the middleware scopes it to the principal.
func TestPrincipalKeyWithinTheGuardsLimit(t *testing.T) {
	g := memoryGuard(t, &idemkit.Options{MaxKeyLen: 100})
	h := Middleware(g, &Options{Principal: func(*http.Request) (string, error) { return "alice", nil }})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	if rec := serve(h, req("POST", "/orders", strings.Repeat("k", 95), `{}`)); rec.Code != http.StatusCreated {
		t.Fatalf("a 95-byte client key, Guard MaxKeyLen 100, with a Principal: %d %s", rec.Code, rec.Body.String())
	}
}

// A Guard whose MaxKeyLen is below the length of the keys the middleware derives (71) is refused by
// New rather than answering every token request 400 (the token spent).
func TestNewRefusesAGuardTooShortForDerivedKeys(t *testing.T) {
	tokens, err := NewTokens(NewMemoryTokenStore(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(memoryGuard(t, &idemkit.Options{MaxKeyLen: 64}), &Options{Key: tokens.Key()}); err == nil {
		t.Fatal("New accepted a Guard whose MaxKeyLen (64) refuses a token's key (70 bytes) and hashed scopes (71)")
	}
}

// TestOuterBodyLimitNamedInProblem: a body over the limit of an http.MaxBytesReader outside the
// middleware (http.MaxBytesHandler) gets 413 as one over MaxBodyBytes does, but its detail named
// MaxBodyBytes (1 MiB) as the limit, so a client sizing its retry by it was refused again.
func TestOuterBodyLimitNamedInProblem(t *testing.T) {
	var runs int
	h := http.MaxBytesHandler(Middleware(memoryGuard(t, nil), nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
	})), 100)
	rec := serve(h, req("POST", "/orders", "k", `{"note":"`+strings.Repeat("x", 200)+`"}`))
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "at most 100 bytes") || runs != 0 {
		t.Fatalf("body over an outer limit of 100 bytes: %d %s (%d runs); want 413 naming 100 bytes", rec.Code, rec.Body, runs)
	}
}
