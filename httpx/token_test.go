package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx/redistoken"
	"github.com/idemkit/idemkit/internal/testsvc"
)

var _ TokenStore = (*MemoryTokenStore)(nil)

// tokenBackend is a TokenStore backend the token tests run on; expire makes issued tokens
// expire (by the clock for memory).
type tokenBackend struct {
	name string
	new  func(t *testing.T) (store TokenStore, expire func())
}

func memoryTokenBackend() tokenBackend {
	return tokenBackend{"memory", func(t *testing.T) (TokenStore, func()) {
		var mu sync.Mutex
		now := time.Unix(1_700_000_000, 0)
		st := NewMemoryTokenStore(&MemoryTokenOptions{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
		return st, func() { mu.Lock(); now = now.Add(DefaultTokenTTL); mu.Unlock() }
	}}
}

// redisTokenBackend expires tokens for real: it sets a 1ms TTL on every token key and waits for
// Redis to drop them.
func redisTokenBackend() tokenBackend {
	return tokenBackend{"redis", func(t *testing.T) (TokenStore, func()) {
		rdb := testsvc.Redis(t)
		prefix := testsvc.Name("httpx_tok_") + ":"
		testsvc.CleanRedis(t, rdb, prefix)
		return redistoken.New(rdb, &redistoken.Options{Prefix: prefix}), func() {
			ctx := context.Background()
			keys, err := rdb.Keys(ctx, prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				rdb.PExpire(ctx, k, time.Millisecond)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if n, _ := rdb.Exists(ctx, keys...).Result(); n == 0 || len(keys) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("Redis kept expired tokens")
				}
			}
		}
	}}
}

func TestTokens(t *testing.T) {
	for _, tb := range []tokenBackend{memoryTokenBackend(), redisTokenBackend()} {
		t.Run(tb.name, func(t *testing.T) { testTokens(t, tb) })
	}
}

func testTokens(t *testing.T, tb tokenBackend) {
	ctx := context.Background()
	t.Run("once", func(t *testing.T) {
		st, _ := tb.new(t)
		tokens, _ := NewTokens(st, nil)
		tok, err := tokens.Issue(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := tokens.Consume(ctx, tok.Token, ""); err != nil {
			t.Fatalf("first use: %v", err)
		}
		if err := tokens.Consume(ctx, tok.Token, ""); !errors.Is(err, ErrTokenInvalid) {
			t.Fatalf("second use: %v", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		st, expire := tb.new(t)
		tokens, _ := NewTokens(st, nil)
		tok, _ := tokens.Issue(ctx, "")
		expire()
		if err := tokens.Consume(ctx, tok.Token, ""); !errors.Is(err, ErrTokenInvalid) {
			t.Fatalf("expired token: %v", err)
		}
	})
	t.Run("unknown and malformed", func(t *testing.T) {
		st, _ := tb.new(t)
		tokens, _ := NewTokens(st, nil)
		tok, _ := tokens.Issue(ctx, "")
		other, _ := NewTokens(NewMemoryTokenStore(nil), nil)
		foreign, _ := other.Issue(ctx, "")
		if err := tokens.Consume(ctx, foreign.Token, ""); !errors.Is(err, ErrTokenInvalid) {
			t.Fatalf("unknown token: %v", err)
		}
		for _, bad := range []string{"", "itk_short", strings.Repeat("x", len(tok.Token)), "itk_" + strings.Repeat("!", len(tok.Token)-4)} {
			if err := tokens.Consume(ctx, bad, ""); !errors.Is(err, idemkit.ErrInvalidKey) {
				t.Fatalf("malformed %q: %v", bad, err)
			}
		}
	})
	t.Run("bound to a principal", func(t *testing.T) {
		st, _ := tb.new(t)
		tokens, _ := NewTokens(st, nil)
		tok, _ := tokens.Issue(ctx, "alice")
		if err := tokens.Consume(ctx, tok.Token, "bob"); !errors.Is(err, ErrTokenInvalid) {
			t.Fatalf("another principal: %v", err)
		}
		if err := tokens.Consume(ctx, tok.Token, "alice"); !errors.Is(err, ErrTokenInvalid) {
			t.Fatalf("the token is burnt by a wrong use: %v", err)
		}
	})
	t.Run("concurrent uses", func(t *testing.T) {
		st, _ := tb.new(t)
		tokens, _ := NewTokens(st, nil)
		tok, _ := tokens.Issue(ctx, "")
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if tokens.Consume(ctx, tok.Token, "") == nil {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d uses succeeded", ok.Load())
		}
	})
	t.Run("through the middleware", func(t *testing.T) {
		st, expire := tb.new(t)
		tokens, _ := NewTokens(st, &TokenOptions{Principal: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }})
		bd := setup(t, memoryBackend, &Options{Key: tokens.Key()}, nil)
		issue := func(user string) string {
			r := httptest.NewRequest("POST", "/tokens", nil)
			r.Header.Set("X-User", user)
			rec := httptest.NewRecorder()
			tokens.Handler().ServeHTTP(rec, r)
			var tok Token
			if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || rec.Code != 200 || tok.Header != DefaultTokenHeader ||
				rec.Header().Get(DefaultTokenHeader) != tok.Token || rec.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("issuing: %d %v %s", rec.Code, rec.Header(), rec.Body)
			}
			return tok.Token
		}
		tok := issue("alice")
		if rec := bd.do(req("POST", "/orders", "", `{}`, DefaultTokenHeader, tok, "X-User", "alice")); rec.Code != 201 {
			t.Fatalf("first use: %d %s", rec.Code, rec.Body)
		}
		rec := bd.do(req("POST", "/orders", "", `{}`, DefaultTokenHeader, tok, "X-User", "alice"))
		if rec.Code != 409 || problemType(rec) != ProblemTokenInvalid || bd.calls.Load() != 1 {
			t.Fatalf("second use: %d %s", rec.Code, rec.Body)
		}
		if rec := bd.do(req("POST", "/orders", "", `{}`, DefaultTokenHeader, issue("alice"), "X-User", "bob")); rec.Code != 409 {
			t.Fatalf("another user's token: %d %s", rec.Code, rec.Body)
		}
		old := issue("alice")
		expire()
		if rec := bd.do(req("POST", "/orders", "", `{}`, DefaultTokenHeader, old, "X-User", "alice")); rec.Code != 409 {
			t.Fatalf("expired token: %d %s", rec.Code, rec.Body)
		}
		if rec := bd.do(req("POST", "/orders", "", `{}`, DefaultTokenHeader, "itk_nope", "X-User", "alice")); rec.Code != 400 {
			t.Fatalf("malformed token: %d %s", rec.Code, rec.Body)
		}
		if rec := bd.do(req("POST", "/orders", "", `{}`, "X-User", "alice")); rec.Code != 400 || problemType(rec) != ProblemMissingKey {
			t.Fatalf("no token: %d %s", rec.Code, rec.Body)
		}
		rec = httptest.NewRecorder()
		tokens.Handler().ServeHTTP(rec, httptest.NewRequest("DELETE", "/tokens", nil))
		if rec.Code != 405 {
			t.Fatalf("DELETE on the token handler: %d", rec.Code)
		}
	})
}

func TestNewTokensOptions(t *testing.T) {
	st := NewMemoryTokenStore(nil)
	for _, o := range []*TokenOptions{{TTL: -time.Second}, {TTL: time.Microsecond}, {Header: "bad header"}} {
		if _, err := NewTokens(st, o); err == nil {
			t.Errorf("NewTokens(%+v) accepted", o)
		}
	}
	if _, err := NewTokens(nil, nil); err == nil {
		t.Error("NewTokens(nil) accepted")
	}
}

// failingTokenStore fails every call.
type failingTokenStore struct{}

func (failingTokenStore) Put(context.Context, string, []byte, time.Duration) error {
	return errInjected
}
func (failingTokenStore) Take(context.Context, string) ([]byte, error) { return nil, errInjected }

func TestTokenStoreUnavailable(t *testing.T) {
	tokens, _ := NewTokens(failingTokenStore{}, nil)
	if _, err := tokens.Issue(context.Background(), ""); !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Issue: %v", err)
	}
	rec := httptest.NewRecorder()
	tokens.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/tokens", nil))
	if rec.Code != 503 {
		t.Fatalf("handler: %d", rec.Code)
	}
	valid := "itk_" + strings.Repeat("A", tokenLen-4)
	bd := setup(t, memoryBackend, &Options{Key: tokens.Key()}, nil)
	if rec := bd.do(req("POST", "/x", "", `{}`, DefaultTokenHeader, valid)); rec.Code != 503 {
		t.Fatalf("consume through the middleware: %d %s", rec.Code, rec.Body)
	}
}
