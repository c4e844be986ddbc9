package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
)

// Everything the package knows about lock.Locker's Redis layout is in this file. Two layouts are
// read, so the Admin works before and after the Locker's change to one key per record:
//
//   - two keys: <prefix>{<lock key>}:lock holds the token of the attempt holding the lock, and
//     <prefix>{<lock key>}:result the cached result;
//   - one key: <prefix>{<lock key>} holds either a lock, "L" + token + ":" + deadline in Unix ms, or
//     the cached result (whose first byte, the cache format's version, is never "L").
//
// TestRedisStateFollowsLocker checks this against the real lock.Locker.

// RedisState is what Redis holds for one record.
type RedisState struct {
	// Locked: an attempt holds the lock; LockToken is its token (the record's Owner when that
	// attempt is the record's claim) and LockTTL how long the lock still lives.
	Locked    bool
	LockToken string
	LockTTL   time.Duration
	// Cached: a finished result is cached; duplicates are answered from it without reading the
	// record. CachedSize is its size in bytes, CacheTTL how long it stays.
	Cached     bool
	CachedSize int64
	CacheTTL   time.Duration
}

// redisKeys returns the one-key layout's key, the lock key and the result key of a record's lock key.
func (a *Admin) redisKeys(lockKey string) (single, lockK, resultK string) {
	tag := lockKey
	if tag == "" || tag[0] == '}' || tag[0] == '%' { // lock.Locker's escaping; a Guard's lock keys start with a digit
		tag = "%" + tag
	}
	single = a.opts.RedisPrefix + "{" + tag + "}"
	return single, single + ":lock", single + ":result"
}

// lockValueHead is how many bytes of the one-key layout's value are read to parse a lock value.
const lockValueHead = 128

// Redis returns what Redis holds for the record at storedScope and storedKey (as stored, e.g.
// [idemkit.Address] or an [Entry]'s), in one round trip. It returns an error when the Admin has no
// Redis client or Redis fails.
func (a *Admin) Redis(ctx context.Context, storedScope, storedKey string) (*RedisState, error) {
	rdb := a.opts.Redis
	if rdb == nil {
		return nil, errors.New("admin: no Redis client configured")
	}
	single, lockK, resultK := a.redisKeys(idemkit.LockKey(storedScope, storedKey))
	pipe := rdb.Pipeline()
	head := pipe.GetRange(ctx, single, 0, lockValueHead-1)
	size := pipe.StrLen(ctx, single)
	ttl := pipe.PTTL(ctx, single)
	lockV := pipe.Get(ctx, lockK)
	lockTTL := pipe.PTTL(ctx, lockK)
	resSize := pipe.StrLen(ctx, resultK)
	resTTL := pipe.PTTL(ctx, resultK)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("admin: reading Redis: %w", err)
	}
	st := &RedisState{}
	if v, err := lockV.Result(); err == nil {
		st.Locked, st.LockToken, st.LockTTL = true, v, positive(lockTTL.Val())
	}
	if n := resSize.Val(); n > 0 {
		st.Cached, st.CachedSize, st.CacheTTL = true, n, positive(resTTL.Val())
	}
	if n := size.Val(); n > 0 {
		if token, ok := parseLockValue(head.Val()); ok {
			st.Locked, st.LockToken, st.LockTTL = true, token, positive(ttl.Val())
		} else {
			st.Cached, st.CachedSize, st.CacheTTL = true, n, positive(ttl.Val())
		}
	}
	return st, nil
}

// parseLockValue reads the one-key layout's lock value "L" + token + ":" + deadline.
func parseLockValue(v string) (token string, ok bool) {
	rest, ok := strings.CutPrefix(v, "L")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", false
	}
	if _, err := strconv.ParseInt(rest[i+1:], 10, 64); err != nil {
		return "", false
	}
	return rest[:i], true
}

// positive turns PTTL's negative answers (no expiry, no key) into 0.
func positive(d time.Duration) time.Duration { return max(d, 0) }

// clearScript deletes a record's lock if the owner's token holds it and, when ARGV[2] is "1", its
// cached result, in either layout. KEYS: the one key, the lock key, the result key. ARGV: owner
// token ("" for none), "1" to drop the cached result. Returns how many keys it deleted.
var clearScript = redis.NewScript(`
local n = 0
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  n = n + 1
end
if redis.call('GETRANGE', KEYS[1], 0, 0) == 'L' then
  local v = redis.call('GET', KEYS[1])
  if ARGV[1] ~= '' and string.sub(v, 2, #ARGV[1] + 2) == ARGV[1] .. ':' then
    redis.call('DEL', KEYS[1])
    n = n + 1
  end
elseif ARGV[2] == '1' then
  n = n + redis.call('DEL', KEYS[1])
end
if ARGV[2] == '1' then
  n = n + redis.call('DEL', KEYS[3])
end
return n
`)

// clearRedis deletes rec's holder's lock (if rec's owner still holds it) and, with dropResult, the
// cached result; it returns how many keys it deleted.
func (a *Admin) clearRedis(ctx context.Context, rec *idemkit.Record, dropResult bool) (int64, error) {
	single, lockK, resultK := a.redisKeys(idemkit.LockKey(rec.Scope, rec.Key))
	drop := "0"
	if dropResult {
		drop = "1"
	}
	n, err := clearScript.Run(ctx, a.opts.Redis, []string{single, lockK, resultK}, rec.Owner, drop).Int64()
	if err != nil {
		return 0, fmt.Errorf("admin: clearing Redis: %w", err)
	}
	return n, nil
}
