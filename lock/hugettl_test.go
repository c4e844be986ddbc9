package lock_test

import (
	"math"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock"
)

// TestLockerHugeTTL: the longest time to live a Duration holds (math.MaxInt64, "forever") locks,
// refreshes and caches like any other, in both modes. Rounding it up to whole milliseconds overflowed
// to a negative PX, which Redis refused ("invalid expire time"): every call of a Guard configured so
// failed as if Redis were down.
func TestLockerHugeTTL(t *testing.T) {
	const forever = time.Duration(math.MaxInt64)
	eachMode(t, func(t *testing.T, l *lock.Locker, b *bundle) {
		ctx := testCtx(t)
		tok := token()
		if v, err := l.Acquire(ctx, "k", tok, forever); err != nil || v != nil {
			t.Fatalf("Acquire(ttl=MaxInt64) = %q, %v; want the lock", v, err)
		}
		// PTTL in milliseconds (go-redis's Duration would overflow).
		if ms, err := b.rdb.Do(ctx, "pttl", b.prefix+"{k}").Int64(); err != nil || ms < forever.Milliseconds()-time.Hour.Milliseconds() {
			t.Fatalf("lock PTTL = %d ms, %v; want %d", ms, err, forever.Milliseconds())
		}
		if err := l.Refresh(ctx, "k", tok, forever); err != nil {
			t.Fatalf("Refresh(ttl=MaxInt64) = %v", err)
		}
		if err := l.Release(ctx, "k", tok, []byte("r"), forever); err != nil {
			t.Fatalf("Release(cacheTTL=MaxInt64) = %v", err)
		}
		if v, err := l.Acquire(ctx, "k", token(), forever); err != nil || string(v) != "r" {
			t.Fatalf("Acquire of the cached key = %q, %v; want \"r\"", v, err)
		}
	})
}
