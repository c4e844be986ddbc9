package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestTokenHandlerResponseNeverStored: Tokens.Handler mounted behind the middleware on a guarded
// method (POST, with an Idempotency-Key) had its response stored like any other: the record held the
// issued token in plain text, where only token hashes are said to be kept, and every duplicate — anyone
// who sent the key — was replayed the live token. The middleware now stores nothing for a response
// issuing a token: the claim is released, the client gets its token, and a retry with the key is
// issued a new one (found by a review).
func TestTokenHandlerResponseNeverStored(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := NewTokens(NewMemoryTokenStore(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"guarded", Middleware(g, nil)(tokens.Handler())},
		// Nested in the guarding middleware, a second one for the same call passes the request on
		// under the outer claim.
		{"nested", Middleware(g, nil)(Middleware(g, nil)(tokens.Handler()))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "tok-" + tc.name
			issue := func() string {
				req := httptest.NewRequest(http.MethodPost, "/tokens", nil)
				req.Header.Set(DefaultHeader, key)
				rec := httptest.NewRecorder()
				tc.h.ServeHTTP(rec, req)
				var tok Token
				if err := json.Unmarshal(rec.Body.Bytes(), &tok); rec.Code != http.StatusOK || err != nil || tok.Token == "" {
					t.Fatalf("POST /tokens: %d %s (%v)", rec.Code, rec.Body, err)
				}
				if rec.Header().Get(ReplayedHeader) != "" {
					t.Fatalf("a token replayed: %v", rec.Header())
				}
				return tok.Token
			}
			first := issue()
			scope := DefaultScope(httptest.NewRequest(http.MethodPost, "/tokens", nil))
			if rec, err := g.Get(context.Background(), scope, key); err == nil && bytes.Contains(rec.Response, []byte(first)) {
				t.Fatalf("the record holds the issued token in plain text: %q", rec.Response)
			}
			if second := issue(); second == first {
				t.Fatal("the retry was answered the first token again")
			}
			if err := tokens.Consume(context.Background(), first, ""); err != nil {
				t.Fatalf("the first token: %v", err)
			}
		})
	}
}
