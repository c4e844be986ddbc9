package lock

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/batch"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the default [Options.Prefix].
const DefaultPrefix = "idemkit:"

// Client is the part of a go-redis v9 client a [Locker] uses: sending a command (Process) and running
// Lua scripts through [redis.Script.Run] (EVALSHA, then EVAL when the server lacks the script). It is
// satisfied by *redis.Client, *redis.ClusterClient, *redis.Ring and redis.UniversalClient, and by any
// wrapper that embeds one of them (tests wrap it to inject faults).
//
// Create the client with ContextTimeoutEnabled set: without it go-redis does not let a context's
// deadline bound socket reads and writes, and a Locker call on an unresponsive Redis waits for the
// client's ReadTimeout and WriteTimeout instead.
type Client interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Options configure a [Locker]. The zero value works.
type Options struct {
	// Prefix starts every Redis key the Locker writes, so applications can share a Redis. Give each
	// application whose records are elsewhere (another table or database) its own: the key of a call
	// names its scope and key, not its Store, so with one prefix a key one application finished is
	// replayed by the other from the cache, whose function never runs (or give each its own
	// idemkit.Options.Namespace). It must not contain '{' or '}' (the Locker places the key's hash
	// tag itself). Defaults to DefaultPrefix ("idemkit:").
	Prefix string
	// Scripts makes every operation a Lua script, the way the Locker works on a Redis older than
	// 7.0, which refuses SET with both NX and GET. Defaults to false: native commands, switching to
	// scripts the first time the server refuses one (see [Locker]). Set it for a proxy that refuses
	// SET ... GET, or to exercise the fallback.
	Scripts bool
	// MaxInFlight bounds the round trips the Locker's native commands (Acquire, and Release with a
	// result) have in flight to Redis at once. A command issued while that many are out waits, and
	// leaves with every other command that waited, in one pipeline, as soon as one returns: automatic
	// pipelining. Under concurrency this cuts system calls and Redis's per-command work; a lone caller
	// never waits. While round trips keep returning with commands waiting, a command that could go
	// out at once yields its processor first (runtime.Gosched), and the commands issued meanwhile
	// leave with it. Defaults to DefaultMaxInFlight (1); negative turns it off (every command its own
	// round trip, on as many connections as the client's pool gives). It applies when the client is a
	// *redis.Client, *redis.ClusterClient or *redis.Ring (what redis.NewUniversalClient returns);
	// other clients (wrappers) get every command through their Process. Scripts are never batched,
	// nor is a cached result of 1 MiB or more (a Redis whose proto-max-bulk-len it exceeds closes the
	// connection, and the commands batched behind it would fail), nor the Acquire of a key known to
	// hold one (cached by this Locker, or answered so once): its reply takes as long as the result
	// takes to come, and every command waiting for the round trip would wait for it.
	// On a Redis Cluster the bound is per primary: a command waits for, and leaves with, the commands
	// for the same primary (as the client's slot map has it), so a node that is slow or down holds up
	// and fails its own keys' commands only.
	MaxInFlight int
}

// Locker is an [idemkit.Locker] on Redis: one Redis key per idempotency key, holding either the lock
// of the attempt running it or the cached result of a finished one.
//
// The key for K is <prefix>{K}. The braces are a Redis Cluster hash tag, so the slot depends on K
// only. K is used as is, except that a K that is empty or starts with '%' gets a '%' in front, so the
// tag is never empty and distinct keys stay distinct; and a K holding a '}', which would end the tag
// early, is tagged with a hash of it instead: <prefix>{#<16 hex digits>}K. The value is either a lock, "L" followed
// by the holder's deadline (Unix ms), ':' and its token, or a cached result: the result as given,
// prefixed with "E" when it is empty or starts with 'L' or 'E' (the Guard's cached results start with
// a format byte below 0x20 and are stored as they are).
//
// Commands, on Redis 7.0 or later:
//
//   - Acquire is one native SET key lock NX PX ttl GET, which answers in one command whether the key
//     was free (now locked), locked (the holder's deadline gives [idemkit.InFlightError.RetryAfter])
//     or holds a cached result.
//   - Release with a result is one native SET key result PX ttl GET: the result replaces the lock (or
//     whatever the key held: a finished, committed result is the answer for every attempt), and the
//     old value tells whether the lock was still ours.
//   - Release without a result (compare-and-delete) and Refresh (compare-and-set) are Lua scripts,
//     run with EVALSHA and, when the server lost its script cache, EVAL.
//
// On a Redis older than 7.0 the first SET NX GET fails with a syntax error; the Locker then runs Lua
// scripts doing the same for the rest of its life (see [Locker.Scripts]).
// A Redis out of memory under the noeviction policy refuses SET ... NX ... GET even for a key holding
// a cached result; that Acquire then runs the script, which replays it.
//
// A Locker is safe for concurrent use.
type Locker struct {
	client  Client
	batch   *batcher // nil: every command through client.Process
	prefix  string
	scripts atomic.Bool // native SET ... GET refused, or Options.Scripts: scripts only
	lockTTL atomic.Pointer[ttlArg]
	fillTTL atomic.Pointer[ttlArg]
	big     bigKeys // keys holding a large cached result: their Acquires are not batched
}

// ttlArg is a time to live in milliseconds, boxed for go-redis once: a Guard always passes the same
// lock TTL (and mostly the same cache TTL), so the common case allocates nothing for it.
type ttlArg struct {
	ms  int64
	arg any
}

// New returns a Locker on client, configured by opts (nil for defaults). It copies opts.
//
// How long a call waits for a Redis that is down is client's to say. go-redis's defaults dial a
// refused connection 5 times and retry each command 3 times, with backoffs: about 1.7 s per call at
// first. A client with MaxRetries -1 and DialerRetries 1 gives up at once, so that a Guard with
// FailOpen carries on with its Store without waiting (README, "Guarantees and their limits").
//
// New panics when client is nil or opts.Prefix contains '{' or '}': both are programmer errors.
func New(client Client, opts *Options) *Locker {
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
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	l := &Locker{client: client, prefix: o.Prefix, batch: newBatcher(client, o.MaxInFlight)}
	l.scripts.Store(o.Scripts)
	return l
}

// Scripts reports whether the Locker runs Lua scripts instead of native commands: because
// Options.Scripts was set, or since the server refused SET with NX and GET (Redis before 7.0).
func (l *Locker) Scripts() bool { return l.scripts.Load() }

// Value markers.
const (
	markLock    = 'L' // a lock: "L" + deadline in Unix ms + ":" + token
	markEscaped = 'E' // a cached result that is empty or would start with a marker
)

// Acquire implements [idemkit.Locker]. In one command it returns the cached result for key when there
// is one (taking no lock); else it locks key with token for ttl (rounded up to a millisecond) and
// returns (nil, nil); else it returns an [*idemkit.InFlightError] whose RetryAfter is the time left
// until the holder's deadline by this process's clock (never negative). Acquiring with the token that
// holds the lock succeeds and leaves the lock as it is, so a command go-redis retries after a lost
// reply (Options.MaxRetries) does not lock its own attempt out; tokens are per attempt, so this is
// not re-entrancy.
//
// Other errors: ctx's error when ctx is done, an error when ttl is not positive, and Redis errors
// wrapped with what was being done; none of them matches [idemkit.ErrLocked]. When ctx ended before
// the command was sent (done on entry, or while the command waited for a pipeline: see
// [Options.MaxInFlight]) the error matches [idemkit.ErrNotSent] too: no lock was taken, and there is
// nothing to release.
func (l *Locker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	const doing = "acquiring"
	ms, err := millis(doing, ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: %s: %w: %w", doing, idemkit.ErrNotSent, err)
	}
	now := time.Now()
	k, lockVal := l.keyAndLock(key, now.UnixMilli()+ms, token)
	v, err := l.acquire(ctx, k, lockVal, ms)
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil // the key was free and is ours now
	case errors.Is(err, batch.ErrWithdrawn):
		// Its caller left while it waited for a pipeline: never sent, it takes no lock.
		return nil, fmt.Errorf("lock: %s: %w: %w", doing, idemkit.ErrNotSent, err)
	case err != nil:
		return nil, interpretError(ctx, doing, err)
	}
	return interpretValue(doing, v, token, now)
}

// acquire sets k to lockVal unless it exists, and returns what it held (redis.Nil when nothing).
func (l *Locker) acquire(ctx context.Context, k, lockVal string, ms int64) ([]byte, error) {
	if !l.scripts.Load() {
		cmd := redis.NewStringCmd(ctx, "set", k, lockVal, "nx", "px", boxed(&l.lockTTL, ms), "get")
		var err error
		if l.batch != nil && l.big.has(k) {
			// Its reply is long: batched, it would hold up every command waiting for the
			// round trip to end.
			err = l.client.Process(ctx, cmd)
		} else {
			err = l.process(ctx, cmd) // called, not kept in a func value: no allocation
		}
		// A Redis out of memory (maxmemory, noeviction) refuses the SET even where it would write
		// nothing: the script below reads first, and replays a cached result all the same.
		if !l.refused(err) && !outOfMemory(err) {
			if err != nil {
				return nil, err
			}
			v, err := cmd.Bytes() // aliases the reply: no copy
			if l.batch != nil {
				l.big.note(k, len(v) >= soloLen)
			}
			return v, err
		}
	}
	s, err := acquireScript.Run(ctx, l.client, []string{k}, lockVal, ms).Text()
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// interpretValue says what a key's value means for token at now: a lock (ours: acquired; another's:
// in flight) or a cached result.
func interpretValue(doing string, v []byte, token string, now time.Time) ([]byte, error) {
	if len(v) == 0 {
		return []byte{}, nil // never written by this package; the closest reading is an empty result
	}
	switch v[0] {
	case markEscaped:
		return v[1:], nil
	case markLock:
		deadline, holder, ok := splitLock(v)
		if !ok {
			return nil, fmt.Errorf("lock: %s: malformed lock value %q in Redis", doing, v)
		}
		if string(holder) == token {
			return nil, nil
		}
		return nil, &idemkit.InFlightError{RetryAfter: max(time.UnixMilli(deadline).Sub(now), 0), Holder: string(holder)}
	}
	return v, nil
}

// parseLock splits a lock value into its deadline and token.
func parseLock(v []byte) (deadline int64, token string, ok bool) {
	deadline, tok, ok := splitLock(v)
	return deadline, string(tok), ok
}

// splitLock is parseLock with the token left in v: comparing it with a string allocates nothing.
func splitLock(v []byte) (deadline int64, token []byte, ok bool) {
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c == ':' {
			return deadline, v[i+1:], i > 1
		}
		if c < '0' || c > '9' || deadline > (1<<62)/10 {
			return 0, nil, false
		}
		deadline = deadline*10 + int64(c-'0')
	}
	return 0, nil, false
}

// isLockOf reports whether v is a lock held by token.
func isLockOf(v []byte, token string) bool {
	if len(v) == 0 || v[0] != markLock {
		return false
	}
	_, holder, ok := splitLock(v)
	return ok && string(holder) == token
}

// process sends a native command: batched with other callers' when a batcher is on (see
// Options.MaxInFlight), else on its own.
func (l *Locker) process(ctx context.Context, cmd redis.Cmder) error {
	if l.batch != nil {
		return l.batch.do(ctx, cmd)
	}
	return l.client.Process(ctx, cmd)
}

// refused reports whether err is the server refusing a native command's syntax (Redis before 7.0
// refuses SET with NX and GET, before 6.2 SET with GET), and then switches the Locker to scripts.
func (l *Locker) refused(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || !isServerError(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, "syntax error") && !strings.Contains(msg, "not compatible") {
		return false
	}
	l.scripts.Store(true)
	return true
}

// isServerError reports whether err is an error reply of the server (apart so that refused, on the
// hot path, allocates nothing for the common nil error).
func isServerError(err error) bool {
	if _, ok := err.(redis.Error); ok { // as go-redis returns them, redis.Nil too: no allocation
		return true
	}
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// Refresh implements [idemkit.Locker]: it sets the lock's time to live to ttl (rounded up to a
// millisecond), and its deadline accordingly, if token holds it, and returns [idemkit.ErrLockNotHeld]
// otherwise (the key is gone, holds another token's lock, a cached result, or a value of another
// Redis type: see [ErrDamagedLock]). It is one Lua script (compare-and-set). Other errors are as for
// [Locker.Acquire].
func (l *Locker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	const doing = "refreshing"
	ms, err := millis(doing, ttl)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s: %w", doing, err)
	}
	k, lockVal := l.keyAndLock(key, time.Now().UnixMilli()+ms, token)
	v, err := refreshScript.Run(ctx, l.client, []string{k}, token, lockVal, ms).Result()
	if err != nil {
		return interpretError(ctx, doing, err)
	}
	return held(doing, v)
}

// Release implements [idemkit.Locker]. When result is not nil and cacheTTL positive it caches result
// for cacheTTL (rounded up to a millisecond) in place of whatever the key holds — the lock of token or
// of another attempt — in one native command (SET ... PX ... GET); otherwise it deletes the lock if
// token holds it (one Lua script, compare-and-delete). It returns [idemkit.ErrLockNotHeld] when the
// lock was gone or held by another token (a result is cached all the same), or the key holds a value
// of another Redis type (see [ErrDamagedLock]). When caching the result
// fails — Redis refuses it (larger than its proto-max-bulk-len, or no memory left with
// maxmemory-policy noeviction), or the connection fails — the lock is released as without a result,
// and the error says the result is not cached. Other errors are as for [Locker.Acquire]; after one
// of them nothing may have changed, or everything.
//
// Callers usually release on a context detached from the request's cancellation (the Guard does), so
// that an abandoned request still unlocks promptly. An Acquire of key that failed because its context
// ended while its command was out in another caller's pipeline (Options.MaxInFlight) may still lock
// key; a Release without a result waits for that pipeline first (bounded by ctx), so that releasing
// with the Acquire's token frees the key when that Acquire took it. An Acquire whose reply was lost to
// a timeout (its pipeline's deadline, its caller's on a round trip of its own) is another matter: Redis
// may run it after this Release, which goes on another connection, and its lock then stays until its
// time to live ends (see "Round trips" in the package doc).
func (l *Locker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	const doing = "releasing"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock: %s: %w", doing, err)
	}
	k := l.key(key)
	if result == nil || cacheTTL <= 0 {
		return l.unlock(ctx, k, token)
	}
	ms, _ := millis(doing, cacheTTL)
	val := encodeResult(result)
	if l.batch != nil && len(val) < soloLen && !l.scripts.Load() && len(result) > 0 && &val[0] == &result[0] {
		// A batched caller may return (its context ended) while another's pipeline still writes
		// val to Redis: it must not be the caller's buffer, which it may reuse at once. (A result
		// of soloLen bytes or more, or a script, goes out on the caller's own round trip.)
		val = bytes.Clone(val)
	}
	old, err := l.fill(ctx, k, val, ms)
	switch {
	case errors.Is(err, redis.Nil):
		return idemkit.ErrLockNotHeld // the key was empty: the lock had expired
	case err != nil && ctx.Err() == nil:
		// Redis refused the result (an error reply, or a connection reset under a result above its
		// proto-max-bulk-len; no memory left with maxmemory-policy noeviction) and will refuse it
		// again, or the connection failed: the lock would stay until its TTL, answering "in flight"
		// for a finished key. Release it without the result (the next duplicate caches it).
		switch uerr := l.unlock(ctx, k, token); {
		case uerr == nil:
			return fmt.Errorf("lock: %s: result (%d bytes) not cached, the lock is released: %w", doing, len(result), err)
		case errors.Is(uerr, idemkit.ErrLockNotHeld): // gone, another's, or the result after all
			return fmt.Errorf("lock: %s: %w (caching the result, %d bytes: %w)", doing, idemkit.ErrLockNotHeld, len(result), err)
		}
		return interpretError(ctx, doing, err)
	case err != nil:
		return interpretError(ctx, doing, err)
	case !isLockOf(old, token):
		return idemkit.ErrLockNotHeld
	}
	return nil
}

// unlock deletes k if it holds token's lock (compare-and-delete), and returns
// [idemkit.ErrLockNotHeld] if it does not.
func (l *Locker) unlock(ctx context.Context, k, token string) error {
	const doing = "releasing"
	// An Acquire of key whose caller left while its command was out in a pipeline may lock key
	// after this compare-and-delete ran, and the lock would stay: wait for it first.
	if err := l.batch.settled(ctx, k); err != nil {
		return interpretError(ctx, doing, err)
	}
	// A value of another type (a hash, a list) holds no lock of ours: the script answers 0 (Forget
	// deletes it).
	v, err := releaseScript.Run(ctx, l.client, []string{k}, token).Result()
	if err != nil {
		return interpretError(ctx, doing, err)
	}
	return held(doing, v)
}

// outOfMemory reports whether err is Redis's refusal of a command that may write for want of memory
// (maxmemory reached under the noeviction policy).
func outOfMemory(err error) bool {
	return err != nil && isServerError(err) && strings.HasPrefix(err.Error(), "OOM ")
}

// fill sets k to val for ms and returns what it held (redis.Nil when nothing).
func (l *Locker) fill(ctx context.Context, k string, val []byte, ms int64) ([]byte, error) {
	if !l.scripts.Load() {
		cmd := redis.NewStringCmd(ctx, "set", k, val, "px", boxed(&l.fillTTL, ms), "get")
		var err error
		if len(val) >= soloLen {
			err = l.client.Process(ctx, cmd)
		} else {
			err = l.process(ctx, cmd)
		}
		if !l.refused(err) {
			if err != nil {
				return nil, err
			}
			if l.batch != nil {
				l.big.note(k, len(val) >= soloLen) // the replays to come
			}
			return cmd.Bytes()
		}
	}
	s, err := fillScript.Run(ctx, l.client, []string{k}, val, ms).Text()
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// soloLen is the size from which a cached result is sent on its own rather than batched with other
// callers' commands: Redis's smallest proto-max-bulk-len (1 MiB). Redis answers a longer value with
// an error and closes the connection, which would fail every command behind it in the pipeline. The
// Acquires of a key holding such a result (see bigKeys) go on their own too: the round trip of its
// replay lasts as long as the result takes to come, and batched, every command waits for it.
const soloLen = 1 << 20

// maxBigKeys bounds the keys a bigKeys remembers.
const maxBigKeys = 1024

// bigKeys are the Redis keys known to hold a cached result of soloLen bytes or more: cached by this
// Locker, or answered so to one of its Acquires. Forgetting one costs a batched replay, which
// notes it again; remembering one that no longer holds a large result costs one Acquire that is
// not batched, which forgets it.
type bigKeys struct {
	n    atomic.Int32 // len(keys): the common case, none, reads no map
	mu   sync.RWMutex
	keys map[string]struct{}
}

// has reports whether k is known to hold a large cached result.
func (b *bigKeys) has(k string) bool {
	if b.n.Load() == 0 {
		return false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	_, ok := b.keys[k]
	return ok
}

// note records whether k holds a large cached result.
func (b *bigKeys) note(k string, big bool) {
	if big == b.has(k) {
		return // as known: most often, no large result at all
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch _, ok := b.keys[k]; {
	case big && !ok:
		if len(b.keys) >= maxBigKeys {
			for old := range b.keys { // one at random makes room
				delete(b.keys, old)
				break
			}
		}
		if b.keys == nil {
			b.keys = make(map[string]struct{})
		}
		b.keys[k] = struct{}{}
	case !big && ok:
		delete(b.keys, k)
	}
	b.n.Store(int32(len(b.keys)))
}

// encodeResult is the stored form of a cached result (see [Locker]).
func encodeResult(result []byte) []byte {
	if len(result) > 0 && result[0] != markLock && result[0] != markEscaped {
		return result
	}
	b := make([]byte, 0, len(result)+1)
	return append(append(b, markEscaped), result...)
}

// boxed returns ms boxed for a command's arguments, reusing the last one kept in slot.
func boxed(slot *atomic.Pointer[ttlArg], ms int64) any {
	if t := slot.Load(); t != nil && t.ms == ms {
		return t.arg
	}
	t := &ttlArg{ms: ms, arg: ms}
	slot.Store(t)
	return t.arg
}

// writeKey appends the Redis key of key to b: <prefix>{key}, the whole key a hash tag, so that
// Redis Cluster spreads keys by scope and key. A key containing '}' would end the tag early (Redis
// hashes up to the first '}': every key of a scope such as "POST /orders/{id}" would share one slot),
// so its tag is a hash of it instead: <prefix>{#<16 hex digits>}key. Names stay distinct: only those
// have a '}' before their end.
func (l *Locker) writeKey(b *strings.Builder, key string) {
	b.WriteString(l.prefix)
	b.WriteByte('{')
	if strings.IndexByte(key, '}') >= 0 {
		b.WriteByte('#')
		var digits [16]byte
		b.Write(strconv.AppendUint(digits[:0], fnv64a(key)|1<<63, 16)[:16]) // 16 digits: the top bit set
		b.WriteByte('}')
		b.WriteString(key)
		return
	}
	if key == "" || key[0] == '%' {
		b.WriteByte('%')
	}
	b.WriteString(key)
	b.WriteByte('}')
}

// fnv64a is the 64-bit FNV-1a hash of s.
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// keyLen bounds the length of the Redis key of key.
func (l *Locker) keyLen(key string) int { return len(l.prefix) + len(key) + 20 }

// key returns the Redis key of key.
func (l *Locker) key(key string) string {
	var b strings.Builder
	b.Grow(l.keyLen(key))
	l.writeKey(&b, key)
	return b.String()
}

// keyAndLock returns the Redis key of key and the lock value of token with deadline, both slices of
// one string (one allocation).
func (l *Locker) keyAndLock(key string, deadline int64, token string) (string, string) {
	var b strings.Builder
	b.Grow(l.keyLen(key) + 22 + len(token))
	l.writeKey(&b, key)
	n := b.Len()
	b.WriteByte(markLock)
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], deadline, 10))
	b.WriteByte(':')
	b.WriteString(token)
	s := b.String()
	return s[:n], s[n:]
}

// millis converts a time to live to whole milliseconds, rounding up. It divides before it rounds: a
// Duration near its maximum ("forever") plus a millisecond would overflow to a negative PX.
func millis(doing string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("lock: %s: time to live must be positive, got %s", doing, d)
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms, nil
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
