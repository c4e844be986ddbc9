package lock_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// TestDamagedCacheIsNotReplayed: a cached result cut short, or with a byte changed, in Redis (an
// operator's edit, a partial copy between instances) was replayed as the key's result, since the
// cached form carried nothing to check its response against. It is now refused as malformed: the
// duplicate is answered from the record, with what was stored.
func TestDamagedCacheIsNotReplayed(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l})
	damage := map[string]func(v []byte) []byte{
		"truncated": func(v []byte) []byte { return v[:len(v)-3] },
		"corrupted": func(v []byte) []byte { v[len(v)-5] ^= 0x20; return v },
		"extended":  func(v []byte) []byte { return append(v, " and more"...) },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			call := idemkit.Call{Scope: "s", Key: name}
			want := `{"order":"o-1","amount":100}`
			if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte(want), nil }); err != nil {
				t.Fatal(err)
			}
			ad, err := g.Address(call.Scope, call.Key)
			must(t, err)
			k := l.Key(ad.LockKey)
			v, err := b.rdb.Get(ctx, k).Bytes()
			must(t, err)
			must(t, b.rdb.Set(ctx, k, f(v), redis.KeepTTL).Err())
			res, err := g.Do(ctx, call, nil2)
			if err != nil || !res.Replayed || string(res.Value) != want {
				t.Fatalf("replay over a %s cached result = %q (replayed %t), %v; want %q", name, res.Value, res.Replayed, err, want)
			}
		})
	}
}
