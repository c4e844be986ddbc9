package redistoken_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/httpx"
	"github.com/idemkit/idemkit/httpx/redistoken"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

var _ httpx.TokenStore = (*redistoken.Store)(nil)

func setup(t *testing.T) (*redistoken.Store, *redis.Client, string) {
	t.Helper()
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("redistoken_") + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	return redistoken.New(rdb, &redistoken.Options{Prefix: prefix}), rdb, prefix
}

func TestPutTake(t *testing.T) {
	st, rdb, prefix := setup(t)
	ctx := context.Background()
	if err := st.Put(ctx, "id1", []byte("v1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, prefix+"id1").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL %s", ttl)
	}
	if err := st.Put(ctx, "id1", []byte("v2"), time.Minute); err == nil {
		t.Fatal("Put overwrote a stored id")
	}
	v, err := st.Take(ctx, "id1")
	if err != nil || string(v) != "v1" {
		t.Fatalf("Take: %q, %v", v, err)
	}
	if _, err := st.Take(ctx, "id1"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("second Take: %v", err)
	}
	if _, err := st.Take(ctx, "never"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Take of an unknown id: %v", err)
	}
}

// TestOnlyHashesStored: the token never reaches Redis, neither as key nor as value.
func TestOnlyHashesStored(t *testing.T) {
	st, rdb, prefix := setup(t)
	ctx := context.Background()
	tokens, err := httpx.NewTokens(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Issue(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	keys := rdb.Keys(ctx, prefix+"*").Val()
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	secret := strings.TrimPrefix(tok.Token, "itk_")
	if v := rdb.Get(ctx, keys[0]).Val(); strings.Contains(keys[0], secret) || strings.Contains(v, secret) || strings.Contains(v, "alice") {
		t.Fatalf("token or principal stored in clear: %s = %q", keys[0], v)
	}
	if err := tokens.Consume(ctx, tok.Token, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Consume(ctx, tok.Token, "alice"); !errors.Is(err, httpx.ErrTokenInvalid) {
		t.Fatalf("second use: %v", err)
	}
}

func TestExpiry(t *testing.T) {
	st, _, _ := setup(t)
	ctx := context.Background()
	tokens, _ := httpx.NewTokens(st, &httpx.TokenOptions{TTL: time.Millisecond})
	tok, err := tokens.Issue(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // let Redis expire it (not a timing assertion)
	if err := tokens.Consume(ctx, tok.Token, ""); !errors.Is(err, httpx.ErrTokenInvalid) {
		t.Fatalf("expired token: %v", err)
	}
}

// brokenClient fails every command, as an unreachable Redis does.
type brokenClient struct{}

var errDown = errors.New("redis down")

func (brokenClient) SetArgs(ctx context.Context, key string, value any, a redis.SetArgs) *redis.StatusCmd {
	c := redis.NewStatusCmd(ctx)
	c.SetErr(errDown)
	return c
}

func (brokenClient) GetDel(ctx context.Context, key string) *redis.StringCmd {
	c := redis.NewStringCmd(ctx)
	c.SetErr(errDown)
	return c
}

func TestErrors(t *testing.T) {
	st := redistoken.New(brokenClient{}, nil)
	ctx := context.Background()
	if err := st.Put(ctx, "x", nil, time.Second); !errors.Is(err, errDown) {
		t.Fatalf("Put: %v", err)
	}
	if _, err := st.Take(ctx, "x"); !errors.Is(err, errDown) || errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Take: %v", err)
	}
	tokens, _ := httpx.NewTokens(st, nil)
	if _, err := tokens.Issue(ctx, ""); !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Issue: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	redistoken.New(nil, nil)
}

// TestNonPositiveTTL: a token put with a time to live of zero or less is refused with an error. It
// was stored without any expiry (go-redis sends no PX for a zero TTL): a one-time token usable
// forever, where httpx.MemoryTokenStore's expired at once.
func TestNonPositiveTTL(t *testing.T) {
	st, rdb, prefix := setup(t)
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, -time.Second} {
		if err := st.Put(ctx, "id", []byte("v"), ttl); err == nil || !strings.Contains(err.Error(), "time to live") {
			t.Errorf("Put(ttl=%s) = %v; want an error about the time to live", ttl, err)
		}
		if n := rdb.Exists(ctx, prefix+"id").Val(); n != 0 {
			t.Fatalf("Put(ttl=%s) stored the token (PTTL %s)", ttl, rdb.PTTL(ctx, prefix+"id").Val())
		}
	}
}
