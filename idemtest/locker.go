package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// NewLocker returns the Locker under test; each call gets a fresh key space (e.g. its own prefix).
type NewLocker func(t *testing.T) idemkit.Locker

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantLocked fails t unless key is locked for at most ttl more, by holder as far as the Locker says.
func wantLocked(t *testing.T, l idemkit.Locker, key, holder string, ttl time.Duration) {
	t.Helper()
	cached, err := l.Acquire(ctxb, key, "intruder", ttl)
	var inf *idemkit.InFlightError
	if cached != nil || !errors.As(err, &inf) || !errors.Is(err, idemkit.ErrLocked) || !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("Acquire of a held lock: cached %q, error %v; want an InFlightError", cached, err)
	}
	if inf.RetryAfter < 0 || inf.RetryAfter > ttl+time.Millisecond {
		t.Fatalf("RetryAfter %s outside [0, %s]", inf.RetryAfter, ttl)
	}
	if inf.Holder != "" && inf.Holder != holder {
		// The Guard reads the holder's payload off its token: a wrong one answers a duplicate
		// ErrPayloadMismatch (final) where it is in flight, or the reverse.
		t.Fatalf("Holder %q, want the token holding the lock (%q) or none", inf.Holder, holder)
	}
}

// RunLocker runs the Locker conformance suite. Subtests run one after another.
func RunLocker(t *testing.T, newLocker NewLocker) {
	const ttl = 10 * time.Second

	t.Run("Exclusive", func(t *testing.T) {
		l := newLocker(t)
		cached, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		if err != nil || cached != nil {
			t.Fatalf("Acquire of a free key: %q, %v", cached, err)
		}
		wantLocked(t, l, "k", "tok-1", ttl)
		// The same token acquiring again succeeds: a client retrying a command whose reply was lost
		// must not lock its own attempt out. Tokens are per attempt, so this is not re-entrancy.
		if _, err := l.Acquire(ctxb, "k", "tok-1", ttl); err != nil {
			t.Fatalf("re-Acquire by the holding token: %v, want success (idempotent retry)", err)
		}
		wantLocked(t, l, "k", "tok-1", ttl)
		if _, err := l.Acquire(ctxb, "other", "tok-2", ttl); err != nil {
			t.Fatalf("another key: %v", err)
		}
	})

	t.Run("ReacquireLeavesTheLock", func(t *testing.T) {
		// An Acquire by the holding token changes nothing: its ttl does not become the lock's
		// (Refresh extends a lock), as the holder's remaining time, seen by another token, shows.
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		if _, err := l.Acquire(ctxb, "k", "tok-1", time.Hour); err != nil {
			t.Fatalf("re-Acquire by the holding token: %v, want success (idempotent retry)", err)
		}
		wantLocked(t, l, "k", "tok-1", ttl)
		must(t, l.Release(ctxb, "k", "tok-1", nil, 0))
	})

	t.Run("ReleaseComparesToken", func(t *testing.T) {
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		wantErr(t, l.Release(ctxb, "k", "tok-2", nil, 0), idemkit.ErrLockNotHeld)
		wantLocked(t, l, "k", "tok-1", ttl)
		must(t, l.Release(ctxb, "k", "tok-1", nil, 0))
		wantErr(t, l.Release(ctxb, "k", "tok-1", nil, 0), idemkit.ErrLockNotHeld)
		if _, err := l.Acquire(ctxb, "k", "tok-2", ttl); err != nil {
			t.Fatalf("Acquire after release: %v", err)
		}
	})

	t.Run("LockExpires", func(t *testing.T) {
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", 100*time.Millisecond)
		must(t, err)
		eventually(t, "lock expiry", func() bool {
			_, err := l.Acquire(ctxb, "k", "tok-2", ttl)
			return err == nil
		})
		wantErr(t, l.Refresh(ctxb, "k", "tok-1", ttl), idemkit.ErrLockNotHeld)
		wantErr(t, l.Release(ctxb, "k", "tok-1", nil, 0), idemkit.ErrLockNotHeld)
		wantLocked(t, l, "k", "tok-2", ttl) // tok-2 still holds it
	})

	t.Run("RefreshExtends", func(t *testing.T) {
		l := newLocker(t)
		short := time.Second // two round trips must fit in it, on a loaded machine too
		_, err := l.Acquire(ctxb, "k", "tok-1", short)
		must(t, err)
		wantErr(t, l.Refresh(ctxb, "k", "tok-2", ttl), idemkit.ErrLockNotHeld)
		must(t, l.Refresh(ctxb, "k", "tok-1", ttl))
		time.Sleep(short + short/2) // past the original TTL
		wantLocked(t, l, "k", "tok-1", ttl)
		must(t, l.Release(ctxb, "k", "tok-1", nil, 0))
	})

	t.Run("ReleaseFillsCache", func(t *testing.T) {
		l := newLocker(t)
		result := []byte{0, 'r', 0, 0xff}
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k", "tok-1", result, time.Hour))
		for _, tok := range []string{"tok-2", "tok-3"} { // a cache hit takes no lock
			cached, err := l.Acquire(ctxb, "k", tok, ttl)
			must(t, err)
			if !bytes.Equal(cached, result) {
				t.Fatalf("cached %q, want %q", cached, result)
			}
		}
		big := bytes.Repeat([]byte("x"), 256<<10)
		_, err = l.Acquire(ctxb, "big", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "big", "tok-1", big, time.Hour))
		cached, err := l.Acquire(ctxb, "big", "tok-2", ttl)
		must(t, err)
		if !bytes.Equal(cached, big) {
			t.Fatalf("big result: got %d bytes", len(cached))
		}
	})

	t.Run("CachedResultIsACopy", func(t *testing.T) {
		// The cache keeps its own copy, and hands each caller its own: a caller reusing the buffer
		// it released, or writing into a replay's Result.Value, must not change what later
		// duplicates are answered.
		l := newLocker(t)
		result := []byte("result")
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k", "tok-1", result, time.Hour))
		copy(result, "XXXXXX")
		for _, tok := range []string{"tok-2", "tok-3"} {
			cached, err := l.Acquire(ctxb, "k", tok, ttl)
			if err != nil || string(cached) != "result" {
				t.Fatalf("Acquire(%s) after the callers wrote into their buffers: %q, %v; want %q", tok, cached, err, "result")
			}
			copy(cached, "YYYYYY")
		}
	})

	t.Run("EmptyResultCaches", func(t *testing.T) {
		// An empty result is a result (not nil): it is cached, and a cache hit is an empty,
		// non-nil slice, never the (nil, nil) of an acquired lock.
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k", "tok-1", []byte{}, time.Hour))
		for _, tok := range []string{"tok-2", "tok-3"} {
			cached, err := l.Acquire(ctxb, "k", tok, ttl)
			if err != nil || cached == nil || len(cached) != 0 {
				t.Fatalf("Acquire(%s) of a key caching an empty result: %q (nil: %t), %v; want an empty cached result", tok, cached, cached == nil, err)
			}
		}
	})

	t.Run("CacheExpires", func(t *testing.T) {
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k", "tok-1", []byte("r"), 100*time.Millisecond))
		eventually(t, "cache expiry", func() bool {
			cached, err := l.Acquire(ctxb, "k", "tok-2", ttl)
			must(t, err)
			return cached == nil // not cached any more: tok-2 now holds the lock
		})
		wantLocked(t, l, "k", "tok-2", ttl)
	})

	t.Run("ReleaseByNonHolderStillCaches", func(t *testing.T) {
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		wantErr(t, l.Release(ctxb, "k", "tok-2", []byte("r"), time.Hour), idemkit.ErrLockNotHeld)
		cached, err := l.Acquire(ctxb, "k", "tok-3", ttl)
		must(t, err)
		if string(cached) != "r" {
			t.Fatalf("cached %q, want r", cached)
		}
		// Without a result, nothing is cached.
		_, err = l.Acquire(ctxb, "k2", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k2", "tok-1", nil, time.Hour))
		cached, err = l.Acquire(ctxb, "k2", "tok-2", ttl)
		must(t, err)
		if cached != nil {
			t.Fatalf("cached %q after a release without result", cached)
		}
	})

	t.Run("OneEntryPerKey", func(t *testing.T) {
		// A key holds a lock or a cached result, never both: the result of a finished attempt
		// replaces its lock, and a cached result answers every Acquire, whatever its token.
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", ttl)
		must(t, err)
		must(t, l.Release(ctxb, "k", "tok-1", []byte("r"), time.Hour))
		for _, tok := range []string{"tok-1", "tok-2"} {
			cached, err := l.Acquire(ctxb, "k", tok, ttl)
			if err != nil || string(cached) != "r" {
				t.Fatalf("Acquire(%s) of a cached key: %q, %v; want the result", tok, cached, err)
			}
		}
		wantErr(t, l.Refresh(ctxb, "k", "tok-1", ttl), idemkit.ErrLockNotHeld)
		// A release without a result leaves a cached result alone.
		wantErr(t, l.Release(ctxb, "k", "tok-1", nil, 0), idemkit.ErrLockNotHeld)
		cached, err := l.Acquire(ctxb, "k", "tok-3", ttl)
		if err != nil || string(cached) != "r" {
			t.Fatalf("after a release without result: %q, %v; want the cached result", cached, err)
		}
		// A result caches even when the lock expired before the release.
		_, err = l.Acquire(ctxb, "late", "tok-1", 50*time.Millisecond)
		must(t, err)
		time.Sleep(100 * time.Millisecond)
		wantErr(t, l.Release(ctxb, "late", "tok-1", []byte("late"), time.Hour), idemkit.ErrLockNotHeld)
		cached, err = l.Acquire(ctxb, "late", "tok-2", ttl)
		if err != nil || string(cached) != "late" {
			t.Fatalf("after a late release: %q, %v; want the cached result", cached, err)
		}
	})

	t.Run("KeysCompareByteForByte", func(t *testing.T) {
		// Keys a text collation folds together (case, trailing spaces, accents, Unicode
		// normalisation), and the longest keys a Guard gives (idemkit.LockKey of a scope and a key
		// of idemkit.MaxStoredLen bytes each) that differ in their last byte only, are different
		// keys: a Locker conflating them replays one client's result to another's request.
		l := newLocker(t)
		long := strings.Repeat("é", idemkit.MaxStoredLen/2)
		keys := []string{"key", "KEY", "Key", "key ", "kéy", "ke\u0301y", "kèy",
			idemkit.LockKey(long, long[:len(long)-1]+"a"), idemkit.LockKey(long, long[:len(long)-1]+"b")}
		for i, k := range keys {
			_, err := l.Acquire(ctxb, k, "tok-1", ttl)
			if err != nil {
				t.Fatalf("Acquire(%q), the %d-th of keys a collation or a truncation conflates: %v; want the lock", k, i, err)
			}
			must(t, l.Release(ctxb, k, "tok-1", fmt.Appendf(nil, "result-%d", i), time.Hour))
		}
		for i, k := range keys {
			cached, err := l.Acquire(ctxb, k, "tok-2", ttl)
			if err != nil || string(cached) != fmt.Sprintf("result-%d", i) {
				t.Fatalf("Acquire(%q): %q, %v; want its own result-%d", k, cached, err, i)
			}
		}
	})

	t.Run("RetryAfterFollowsRefresh", func(t *testing.T) {
		l := newLocker(t)
		_, err := l.Acquire(ctxb, "k", "tok-1", 10*time.Second)
		must(t, err)
		must(t, l.Refresh(ctxb, "k", "tok-1", time.Hour))
		_, err = l.Acquire(ctxb, "k", "tok-2", ttl)
		var inf *idemkit.InFlightError
		if !errors.As(err, &inf) || inf.RetryAfter <= time.Minute || inf.RetryAfter > time.Hour {
			t.Fatalf("after Refresh(1h): %v; want an InFlightError with RetryAfter in (1m, 1h]", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		l := newLocker(t)
		var wins, locked atomic.Int32
		parallel(64, func(i int) {
			_, err := l.Acquire(ctxb, "race", fmt.Sprintf("tok-%d", i), ttl)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, idemkit.ErrLocked):
				locked.Add(1)
			default:
				t.Error(err)
			}
		})
		if wins.Load() != 1 || locked.Load() != 63 {
			t.Fatalf("%d acquired, %d locked out; want 1 and 63", wins.Load(), locked.Load())
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		l := newLocker(t)
		ctx, cancel := context.WithCancel(ctxb)
		cancel()
		_, err := l.Acquire(ctx, "k", "tok-1", ttl)
		if err == nil || errors.Is(err, idemkit.ErrLocked) {
			t.Fatalf("Acquire on a cancelled context: %v", err)
		}
	})
}
