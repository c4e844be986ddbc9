package httpx

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/idemtest"
)

// slowPutStore is a TokenStore whose Put takes took, by the clock clk.
type slowPutStore struct {
	TokenStore
	clk  *idemtest.Clock
	took time.Duration
}

func (s slowPutStore) Put(ctx context.Context, id string, value []byte, ttl time.Duration) error {
	err := s.TokenStore.Put(ctx, id, value, ttl)
	s.clk.Advance(s.took)
	return err
}

// TestTokenExpiresAtIsNotLate: the expiresAt a client is told is never after the token's expiry in
// its store. It was counted from after the store's Put returned, while the store counts the TTL from
// when it stored the token: by the time the Put took (a slow Redis, a pool waiting for a
// connection), the client was told its token lived longer than it does, and a request sent just
// before the time it was told was refused as a used or unknown token.
func TestTokenExpiresAtIsNotLate(t *testing.T) {
	ctx := context.Background()
	clk := idemtest.NewClock()
	store := slowPutStore{TokenStore: NewMemoryTokenStore(&MemoryTokenOptions{Now: clk.Now}), clk: clk, took: 2 * time.Second}
	tokens, err := NewTokens(store, &TokenOptions{TTL: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Issue(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(tok.ExpiresAt.Sub(clk.Now()) - time.Millisecond) // just before the time the client was told
	if err := tokens.Consume(ctx, tok.Token, ""); err != nil {
		t.Fatalf("the token used 1ms before the expiresAt its client was told (%s): %v", tok.ExpiresAt.Format(time.RFC3339Nano), err)
	}
}
