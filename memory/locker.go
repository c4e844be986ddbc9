package memory

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// LockerOptions configure a [Locker]. The zero value works.
type LockerOptions struct {
	// Now is the clock that expires locks and cached results. Defaults to time.Now.
	Now func() time.Time
}

// Locker is an in-memory [idemkit.Locker] with real expiry: locks and cached results vanish after
// their TTL by the clock given in its options. Expired entries are dropped as they are met, and every
// operation also samples a few entries and drops the expired ones (as Redis does), so memory follows the
// live entries without a goroutine. It is safe for concurrent use.
type Locker struct {
	now   func() time.Time
	mu    sync.Mutex
	locks map[string]entry
	cache map[string]entry
}

type entry struct {
	token   string
	value   []byte
	expires time.Time
}

// sampled is how many entries of each map an operation checks for expiry.
const sampled = 3

// NewLocker returns an empty Locker configured by opts (nil for defaults).
func NewLocker(opts *LockerOptions) *Locker {
	l := &Locker{now: time.Now, locks: make(map[string]entry), cache: make(map[string]entry)}
	if opts != nil && opts.Now != nil {
		l.now = opts.Now
	}
	return l
}

// live returns m[key] if it has not expired at now, dropping it if it has.
func live(m map[string]entry, key string, now time.Time) (entry, bool) {
	e, ok := m[key]
	if ok && !now.Before(e.expires) {
		delete(m, key)
		return entry{}, false
	}
	return e, ok
}

// tick drops expired entries among a few sampled from each map (map iteration starts at a random
// entry), so expiry keeps pace with insertion.
func (l *Locker) tick(now time.Time) {
	for _, m := range [2]map[string]entry{l.locks, l.cache} {
		n := 0
		for k, e := range m {
			if !now.Before(e.expires) {
				delete(m, k)
			}
			if n++; n == sampled {
				break
			}
		}
	}
}

// Acquire implements [idemkit.Locker].
func (l *Locker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tick(now)
	if c, ok := live(l.cache, key, now); ok {
		return c.value, nil
	}
	if e, ok := live(l.locks, key, now); ok && e.token != token {
		return nil, &idemkit.InFlightError{RetryAfter: e.expires.Sub(now)}
	}
	l.locks[key] = entry{token: token, expires: now.Add(ttl)}
	return nil, nil
}

// Refresh implements [idemkit.Locker].
func (l *Locker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := live(l.locks, key, now)
	if !ok || e.token != token {
		return idemkit.ErrLockNotHeld
	}
	e.expires = now.Add(ttl)
	l.locks[key] = e
	return nil
}

// Release implements [idemkit.Locker].
func (l *Locker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if result != nil && cacheTTL > 0 {
		l.cache[key] = entry{value: append([]byte(nil), result...), expires: now.Add(cacheTTL)}
	}
	e, ok := live(l.locks, key, now)
	if !ok || e.token != token {
		return idemkit.ErrLockNotHeld
	}
	delete(l.locks, key)
	return nil
}
