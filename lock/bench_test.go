package lock_test

import (
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
