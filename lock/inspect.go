package lock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrDamagedLock is what [Locker.State] wraps when the key holds a damaged lock value: one that
// starts like a lock but is none the Locker wrote (no deadline or no token: a partial copy, an
// operator's edit), or a value of another Redis type than a string (a hash, a list: another
// application sharing the prefix). No attempt holds it, since no token can refresh or release it,
// yet Acquire refuses it, so a Guard failing closed answers the key ErrLockUnavailable for as long
// as Redis keeps it; [Locker.Forget] deletes it.
var ErrDamagedLock = errors.New("malformed lock value")

// State is what the Redis key of one idempotency key holds, as [Locker.State] reads it: nothing, the
// lock of a running attempt, or a finished attempt's cached result.
type State struct {
	// Locked reports that an attempt holds the lock. Token is the attempt's token (a Guard's claim
	// writes the same token into its record's Owner) and Deadline the deadline the holder wrote
	// (its Acquire's or last Refresh's time to live from then, by the holder's clock).
	Locked   bool
	Token    string
	Deadline time.Time
	// Cached reports that a finished result is cached; Size is its length in bytes, as given to
	// Release (without the escape byte the Locker may store in front of it).
	Cached bool
	Size   int64
	// TTL is how long Redis keeps the key (lock or result): 0 when the key is absent or has no
	// expiry (the Locker always sets one).
	TTL time.Duration
}

// Key returns the Redis key the Locker uses for key: <prefix>{key}, with the escaping described at
// [Locker]. Operators' tools use it to find a key's lock or cached result (MEMORY USAGE, TTL).
func (l *Locker) Key(key string) string { return l.key(key) }

// State returns what Redis holds for key, read in one atomic step (one Lua script; a cached result
// is measured, not transferred). It is for operators' tools and tests, not for the Guard's path. It
// returns ctx's error when ctx is done, an error when the key holds a malformed lock value, and
// Redis errors wrapped with what was being done. A damaged lock value or a value of another Redis
// type, which Forget deletes, is an error wrapping [ErrDamagedLock], with the State's TTL set.
func (l *Locker) State(ctx context.Context, key string) (State, error) {
	const doing = "inspecting"
	if err := ctx.Err(); err != nil {
		return State{}, fmt.Errorf("lock: %s: %w", doing, err)
	}
	v, err := inspectScript.Run(ctx, l.client, []string{l.key(key)}).Slice()
	if err != nil {
		return State{}, interpretError(ctx, doing, err)
	}
	return decodeState(doing, v)
}

// decodeState reads the inspect script's reply (see inspect.lua).
func decodeState(doing string, v []any) (State, error) {
	var s State
	if len(v) == 0 {
		return s, unexpectedReply(doing, v)
	}
	pttl, ok := v[0].(int64)
	if !ok {
		return s, unexpectedReply(doing, v)
	}
	if pttl == -2 { // absent
		return s, nil
	}
	s.TTL = max(time.Duration(pttl)*time.Millisecond, 0)
	switch len(v) {
	case 2: // a lock, whole
		val, ok := v[1].(string)
		if !ok {
			return s, unexpectedReply(doing, v)
		}
		deadline, token, ok := parseLock([]byte(val))
		switch {
		case !ok && damagedLock([]byte(val)):
			return State{TTL: s.TTL}, fmt.Errorf("lock: %s: %w %q in Redis", doing, ErrDamagedLock, val)
		case !ok: // a deadline beyond what the Locker writes: forget.lua keeps it as a lock
			return s, fmt.Errorf("lock: %s: malformed lock value %q in Redis", doing, val)
		}
		s.Locked, s.Token, s.Deadline = true, token, time.UnixMilli(deadline)
	case 3: // a cached result: its first byte and its stored length
		head, ok1 := v[1].(string)
		n, ok2 := v[2].(int64)
		if !ok1 || !ok2 {
			return s, unexpectedReply(doing, v)
		}
		if n < 0 { // a value of another type than a string
			return State{TTL: s.TTL}, fmt.Errorf("lock: %s: %w: a value of another type than a string in Redis", doing, ErrDamagedLock)
		}
		s.Cached, s.Size = true, n
		if head == string(markEscaped) {
			s.Size--
		}
	default:
		return s, unexpectedReply(doing, v)
	}
	return s, nil
}

// damagedLock reports whether v, a value starting with markLock, is a damaged lock value: not
// "L" deadline (digits) ":" token, as forget.lua tells.
func damagedLock(v []byte) bool {
	i := bytes.IndexByte(v[1:], ':')
	if i < 1 {
		return true
	}
	for _, c := range v[1 : 1+i] {
		if c < '0' || c > '9' {
			return true
		}
	}
	return false
}

// Forget deletes key's cached result, or its lock when token holds it (an empty token matches no
// lock), in one Lua script (compare-and-delete); another attempt's lock stays, since that attempt is
// running. A value that starts like a lock but is none the Locker wrote (damaged: no deadline or no
// token), or a value of another Redis type than a string, which Acquire refuses and no attempt
// holds, is deleted too. It reports whether it deleted
// the key. An operator's tool calls it after deleting a record, so that no duplicate is answered from
// the cache any more; the Guard never does. Errors are as for [Locker.Acquire].
func (l *Locker) Forget(ctx context.Context, key, token string) (bool, error) {
	const doing = "forgetting"
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("lock: %s: %w", doing, err)
	}
	v, err := forgetScript.Run(ctx, l.client, []string{l.key(key)}, token).Result()
	if err != nil {
		return false, interpretError(ctx, doing, err)
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, unexpectedReply(doing, v)
}
