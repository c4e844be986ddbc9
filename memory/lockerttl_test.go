package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestLockerTTLAsRedis: the memory Locker takes times to live as the Redis one (package lock) does.
// One that is not positive is an error: the memory Locker took the lock with it (expired at once:
// the next caller got it too) and its Refresh returned nil and dropped the lock it said it extended,
// where Redis refuses both. And one is rounded up to a whole millisecond (Redis's PX): a lock of a
// nanosecond held against another token for a millisecond on Redis and for nothing here.
func TestLockerTTLAsRedis(t *testing.T) {
	ctx := context.Background()
	clk := idemtest.NewClock()
	l := memory.NewLocker(&memory.LockerOptions{Now: clk.Now})
	notSentinel := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, idemkit.ErrLocked) || errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("%s: %v, want an error matching neither ErrLocked nor ErrLockNotHeld", what, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		v, err := l.Acquire(ctx, "k", "t1", ttl)
		notSentinel("Acquire with ttl "+ttl.String(), err)
		if v != nil {
			t.Fatalf("Acquire with ttl %s returned %q", ttl, v)
		}
	}
	if _, err := l.Acquire(ctx, "k", "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	notSentinel("Refresh with ttl 0", l.Refresh(ctx, "k", "t1", 0))
	if _, err := l.Acquire(ctx, "k", "t2", time.Minute); !errors.Is(err, idemkit.ErrLocked) {
		t.Fatalf("Acquire by another token after a refused Refresh: %v, want the lock still held", err)
	}

	if _, err := l.Acquire(ctx, "tiny", "t1", time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Microsecond)
	if _, err := l.Acquire(ctx, "tiny", "t2", time.Minute); !errors.Is(err, idemkit.ErrLocked) {
		t.Fatalf("a lock of 1ns, 0.5ms later: %v, want it held (rounded up to 1ms)", err)
	}
	clk.Advance(500 * time.Microsecond)
	if v, err := l.Acquire(ctx, "tiny", "t2", time.Minute); v != nil || err != nil {
		t.Fatalf("a lock of 1ns, 1ms later: %q, %v, want it expired", v, err)
	}
	if _, err := l.Acquire(ctx, "huge", "t1", time.Duration(1<<63-1)); err != nil {
		t.Fatalf("a lock of the longest Duration: %v", err)
	}
}
