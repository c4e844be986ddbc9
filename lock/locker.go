package lock

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the default [Options.Prefix].
const DefaultPrefix = "idemkit:"

// Scripter is the part of a go-redis v9 client a [Locker] uses: running Lua scripts, through
// [redis.Script.Run] (EVALSHA, then EVAL when the server lacks the script), which takes a
// redis.Scripter. It is satisfied by *redis.Client, *redis.ClusterClient, *redis.Ring and
// redis.UniversalClient, and by any wrapper that embeds one of them (tests wrap Eval and EvalSha to
// inject faults).
//
// Create the client with ContextTimeoutEnabled set: without it go-redis does not let a context's
// deadline bound socket reads and writes, and a Locker call on an unresponsive Redis waits for the
// client's ReadTimeout and WriteTimeout instead.
type Scripter interface {
	redis.Scripter
}

// Options configure a [Locker]. The zero value works.
type Options struct {
	// Prefix starts every Redis key the Locker writes, so applications can share a Redis. It must
	// not contain '{' or '}' (the Locker places the key's hash tag itself). Defaults to DefaultPrefix
	// ("idemkit:").
	Prefix string
}

// Locker is an [idemkit.Locker] on Redis: a per-key lock (SET NX PX with the caller's per-attempt token,
// compare-and-pexpire refresh, compare-and-delete release) and a cache of finished results, each
// operation one Lua script and one round trip.
//
// For a key K it uses two Redis keys, <prefix>{K}:lock and <prefix>{K}:result. The braces are a
// Redis Cluster hash tag: both keys live in the same slot, so one script may touch both on a
// cluster. K is used as is, except that a K that is empty or starts with '}' or '%' gets a '%' in
// front, so the tag is never empty and distinct keys stay distinct.
//
// A Locker is safe for concurrent use.
type Locker struct {
	client Scripter
	prefix string
}

// New returns a Locker on client, configured by opts (nil for defaults). It copies opts.
//
// New panics when client is nil or opts.Prefix contains '{' or '}': both are programmer errors.
func New(client Scripter, opts *Options) *Locker {
	if client == nil {
		panic("lock: New: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Prefix = cmp.Or(o.Prefix, DefaultPrefix)
	if strings.ContainsAny(o.Prefix, "{}") {
		panic(fmt.Sprintf("lock: New: Prefix %q must not contain '{' or '}'", o.Prefix))
	}
	return &Locker{client: client, prefix: o.Prefix}
}

// Acquire implements [idemkit.Locker]. In one round trip it returns the cached result for key when
// there is one (taking no lock); else it locks key with token for ttl (rounded up to a millisecond)
// and returns (nil, nil); else it returns an [*idemkit.InFlightError] whose RetryAfter is the
// lock's remaining time to live. Acquiring with the token that holds the lock succeeds and resets
// its ttl, so a command go-redis retries after a lost reply (Options.MaxRetries) does not lock its
// own attempt out; tokens are per attempt, so this is not re-entrancy.
//
// Other errors: ctx's error when ctx is done, an error when ttl is not positive, and Redis errors
// wrapped with what was being done; none of them matches [idemkit.ErrLocked].
func (l *Locker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	const doing = "acquiring"
	ms, err := millis(doing, ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: %s: %w", doing, err)
	}
	keys := l.keys(key, true)
	v, err := acquireScript.Run(ctx, l.client, keys, token, ms).Result()
	if err != nil {
		return nil, interpretError(ctx, doing, err)
	}
	switch v := v.(type) {
	case string: // cached result
		if v == "" {
			return []byte{}, nil
		}
		return []byte(v), nil
	case int64:
		if v < 0 {
			return nil, nil // locked
		}
		return nil, &idemkit.InFlightError{RetryAfter: time.Duration(v) * time.Millisecond}
	}
	return nil, unexpectedReply(doing, v)
}

// Refresh implements [idemkit.Locker]: it sets the lock's time to live to ttl (rounded up to a
// millisecond) if token holds it, and returns [idemkit.ErrLockNotHeld] otherwise. Other errors are
// as for [Locker.Acquire].
func (l *Locker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	const doing = "refreshing"
	ms, err := millis(doing, ttl)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s: %w", doing, err)
	}
	v, err := refreshScript.Run(ctx, l.client, l.keys(key, false), token, ms).Result()
	if err != nil {
		return interpretError(ctx, doing, err)
	}
	return held(doing, v)
}

// Release implements [idemkit.Locker]. In one round trip it caches result for cacheTTL (rounded
// up to a millisecond) when result is not nil and cacheTTL is positive, whoever holds the lock, and
// deletes the lock if token holds it. It returns [idemkit.ErrLockNotHeld] when the lock was gone or
// held by another token (the result is cached all the same). Other errors are as for
// [Locker.Acquire]; after one of them nothing may have changed, or everything.
//
// Callers usually release on a context detached from the request's cancellation (the Guard does),
// so that an abandoned request still unlocks promptly.
func (l *Locker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	const doing = "releasing"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s: %w", doing, err)
	}
	keys := l.keys(key, true)
	var cmd *redis.Cmd
	if result != nil && cacheTTL > 0 {
		ms, _ := millis(doing, cacheTTL)
		cmd = releaseScript.Run(ctx, l.client, keys, token, result, ms)
	} else {
		cmd = releaseScript.Run(ctx, l.client, keys, token)
	}
	v, err := cmd.Result()
	if err != nil {
		return interpretError(ctx, doing, err)
	}
	return held(doing, v)
}

// keys returns the Redis keys of key: the lock key, and the result key when withResult is set.
// Both are slices of one string, built with a single allocation.
func (l *Locker) keys(key string, withResult bool) []string {
	const lockSuffix, resultSuffix = "}:lock", "}:result"
	escape := key == "" || key[0] == '}' || key[0] == '%'
	var b strings.Builder
	b.Grow(2*(len(l.prefix)+len(key)+2) + len(lockSuffix) + len(resultSuffix))
	writeTagged := func() {
		b.WriteString(l.prefix)
		b.WriteByte('{')
		if escape {
			b.WriteByte('%')
		}
		b.WriteString(key)
	}
	writeTagged()
	b.WriteString(lockSuffix)
	if !withResult {
		return []string{b.String()}
	}
	n := b.Len()
	writeTagged()
	b.WriteString(resultSuffix)
	s := b.String()
	return []string{s[:n], s[n:]}
}

// millis converts a time to live to whole milliseconds, rounding up.
func millis(doing string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("lock: %s: time to live must be positive, got %s", doing, d)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond), nil
}

// held interprets the 1/0 reply of the refresh and release scripts.
func held(doing string, v any) error {
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return idemkit.ErrLockNotHeld
	}
	return unexpectedReply(doing, v)
}
