package lock_test

import (
	"context"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"testing"
	"time"
)

// BenchmarkLocker measures the Locker against the real test Redis, one connection's round trips
// included: a new key's Acquire+Release (two scripts) and a cached Acquire (one script).
func BenchmarkLocker(b *testing.B) {
	l, _ := setup(b)
	ctx := b.Context()
	tok := token()

	b.Run("AcquireRelease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Acquire(ctx, "bench-lock", tok, time.Minute); err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx, "bench-lock", tok, nil, 0); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("CachedAcquire", func(b *testing.B) {
		if _, err := l.Acquire(ctx, "bench-cached", tok, time.Minute); err != nil {
			b.Fatal(err)
		}
		result := make([]byte, 256)
		if err := l.Release(ctx, "bench-cached", tok, result, time.Hour); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			v, err := l.Acquire(ctx, "bench-cached", tok, time.Minute)
			if err != nil || len(v) != len(result) {
				b.Fatal(v, err)
			}
		}
	})
}

// BenchmarkGuardReplay is a Guard's cached replay through the Redis Locker: one native command.
func BenchmarkGuardReplay(b *testing.B) {
	l, _ := setup(b)
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: l})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	call := idemkit.Call{Scope: "POST /orders", Key: "bench-replay"}
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte(`{"order":"created"}`), nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := g.Do(ctx, call, nil2); err != nil || !res.Replayed {
			b.Fatal(res, err)
		}
	}
}
