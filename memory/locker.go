package memory

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// LockerOptions configure a [Locker]. The zero value works.
type LockerOptions struct {
	// Now is the clock that expires locks and cached results. Defaults to time.Now. Give it the
	// clock of the Guards using the Locker when they have one (idemkit.Options.Now, a manual clock in
	// a test): records expire by the Guard's clock and cached results by this one, so a test that
	// moves only the Guard's clock past a record's TTL still has its result replayed from the cache,
	// for as long as the cache holds it by time.Now (as a Redis Locker, on real time, would).
	Now func() time.Time
}

// Locker is an in-memory [idemkit.Locker] with real expiry, behaving like the Redis one (package
// lock): one entry per key holding either a lock or a cached result, which replaces the lock when
// released with a result. Entries vanish after their TTL by the clock given in its options. Expired
// entries are dropped as they are met, and every Acquire also samples a few entries and drops the
// expired ones (as Redis does), so memory follows the live entries without a goroutine. It is safe
// for concurrent use.
type Locker struct {
	now     func() time.Time
	mu      sync.Mutex
	entries map[string]entry
}

// entry is a lock (locked, token) or a cached result (value).
type entry struct {
	locked  bool
	token   string
	value   []byte
	expires time.Time
}

// sampled is how many entries an operation checks for expiry.
const sampled = 3

// NewLocker returns an empty Locker configured by opts (nil for defaults).
func NewLocker(opts *LockerOptions) *Locker {
	l := &Locker{now: time.Now, entries: make(map[string]entry)}
	if opts != nil && opts.Now != nil {
		l.now = opts.Now
	}
	return l
}

// live returns the entry of key if it has not expired at now, dropping it if it has.
func (l *Locker) live(key string, now time.Time) (entry, bool) {
	e, ok := l.entries[key]
	if ok && !now.Before(e.expires) {
		delete(l.entries, key)
		return entry{}, false
	}
	return e, ok
}

// tick drops expired entries among a few sampled (map iteration starts at a random entry), so expiry
// keeps pace with insertion.
func (l *Locker) tick(now time.Time) {
	n := 0
	for k, e := range l.entries {
		if !now.Before(e.expires) {
			delete(l.entries, k)
		}
		if n++; n == sampled {
			break
		}
	}
}

// Acquire implements [idemkit.Locker]: the cached result, or the lock (already held by token: left
// as it is), or an [*idemkit.InFlightError] with the holder's remaining time. As with the Redis
// Locker, ttl is rounded up to a millisecond, and one that is not positive is an error (matching
// neither idemkit.ErrLocked nor idemkit.ErrLockNotHeld).
func (l *Locker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	ttl, err := roundTTL("acquiring", ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tick(now)
	if e, ok := l.live(key, now); ok {
		switch {
		case !e.locked:
			// A copy: the caller owns what it is given (a replay's Result.Value), as the Redis
			// Locker's callers own the bytes read off the wire. Never nil, even for an empty
			// result: (nil, nil) says the lock was taken.
			return append([]byte{}, e.value...), nil
		case e.token == token:
			return nil, nil
		}
		return nil, &idemkit.InFlightError{RetryAfter: e.expires.Sub(now), Holder: e.token}
	}
	l.entries[key] = entry{locked: true, token: token, expires: now.Add(ttl)}
	return nil, nil
}

// Refresh implements [idemkit.Locker]. ttl is as for [Locker.Acquire].
func (l *Locker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	ttl, err := roundTTL("refreshing", ttl)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.live(key, now)
	if !ok || !e.locked || e.token != token {
		return idemkit.ErrLockNotHeld
	}
	e.expires = now.Add(ttl)
	l.entries[key] = e
	return nil
}

// Release implements [idemkit.Locker]: a result with a positive cacheTTL (rounded up to a
// millisecond) replaces whatever the key holds; without one, the lock is deleted if token holds it.
func (l *Locker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.live(key, now)
	mine := ok && e.locked && e.token == token
	switch {
	case result != nil && cacheTTL > 0:
		cacheTTL, _ = roundTTL("releasing", cacheTTL)
		l.entries[key] = entry{value: append([]byte{}, result...), expires: now.Add(cacheTTL)}
	case mine:
		delete(l.entries, key)
	}
	if !mine {
		return idemkit.ErrLockNotHeld
	}
	return nil
}

// roundTTL rounds a time to live up to a whole millisecond, as the Redis Locker does (PX), or returns
// the error it returns for one that is not positive.
func roundTTL(doing string, d time.Duration) (time.Duration, error) {
	if d <= 0 {
		return 0, fmt.Errorf("memory: %s: time to live must be positive, got %s", doing, d)
	}
	if r := d % time.Millisecond; r != 0 {
		if d > math.MaxInt64-time.Millisecond {
			return d - r, nil // the longest whole number of milliseconds: "forever" all the same
		}
		d += time.Millisecond - r
	}
	return d, nil
}
