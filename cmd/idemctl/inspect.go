package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
)

// inspectJSON is inspect's --json output.
type inspectJSON struct {
	Scope       string      `json:"scope"`
	Key         string      `json:"key"`
	StoredScope string      `json:"stored_scope"`
	StoredKey   string      `json:"stored_key"`
	LockKey     string      `json:"lock_key"` // the Guard's lock key (idemkit.LockKey); Redis names it redis.key
	Found       bool        `json:"found"`
	Record      *recordJSON `json:"record,omitempty"`
	Redis       *redisJSON  `json:"redis,omitempty"`
	Next        string      `json:"next_attempt"`
}

// redisJSON is what Redis holds for the record, times in milliseconds.
type redisJSON struct {
	// Key is the Redis key holding the lock or the cached result (admin.RedisState.Key).
	Key        string `json:"key"`
	Locked     bool   `json:"locked"`
	LockToken  string `json:"lock_token,omitempty"`
	LockTTLMS  int64  `json:"lock_ttl_ms,omitempty"`
	Cached     bool   `json:"cached"`
	CachedSize int64  `json:"cached_size,omitempty"`
	CacheTTLMS int64  `json:"cache_ttl_ms,omitempty"`
	// Damaged: a damaged lock value (admin.RedisState.Damaged), DamagedTTLMS its TTL (0: none).
	Damaged      bool  `json:"damaged_lock,omitempty"`
	DamagedTTLMS int64 `json:"damaged_lock_ttl_ms,omitempty"`
}

func (c *cli) inspect(ctx context.Context, pos []string) error {
	scope, key := pos[0], pos[1]
	ad, err := c.adm.Address(scope, key)
	if err != nil {
		return err
	}
	rec, getErr := c.adm.Get(ctx, scope, key)
	switch {
	case getErr == nil:
		// Found, perhaps by its hashed stored form: Redis holds it under the record's own address.
		ad.Scope, ad.Key, ad.LockKey = rec.Scope, rec.Key, idemkit.LockKey(rec.Scope, rec.Key)
	case errors.Is(getErr, idemkit.ErrNotFound):
	case errors.Is(getErr, admin.ErrUnknownScope) && c.rdb != nil:
		// No record, but Redis may still hold a lock (the first call of a new scope, in flight) or
		// a cached result (its record purged without --redis): shown, then the error.
	default:
		return getErr
	}
	var rs *admin.RedisState
	switch {
	case c.rdb != nil && rec == nil:
		if ad, rs, err = c.redisWithoutRecord(ctx, scope, key, ad); err != nil {
			return err
		}
	case c.rdb != nil:
		if rs, err = c.adm.Redis(ctx, ad.Scope, ad.Key); err != nil {
			return err
		}
	}
	now := c.now()
	next := nextAttempt(rec, rs, now)
	if c.o.json {
		out := inspectJSON{Scope: scope, Key: key, StoredScope: ad.Scope, StoredKey: ad.Key, LockKey: ad.LockKey,
			Found: rec != nil, Next: next}
		if rs != nil {
			out.Redis = &redisJSON{Key: rs.Key, Locked: rs.Locked, LockToken: rs.LockToken, LockTTLMS: rs.LockTTL.Milliseconds(),
				Cached: rs.Cached, CachedSize: rs.CachedSize, CacheTTLMS: rs.CacheTTL.Milliseconds(),
				Damaged: rs.Damaged, DamagedTTLMS: rs.DamagedTTL.Milliseconds()}
		}
		if rec != nil {
			r := c.recordJSON(rec, int64(len(rec.Response)), now)
			out.Record = &r
		}
		c.writeJSON(out)
	} else {
		c.printInspect(scope, key, ad, rec, rs, now, next)
	}
	switch {
	case errors.Is(getErr, admin.ErrUnknownScope):
		return getErr
	case rec == nil:
		return fmt.Errorf("%w: no record for key %q in scope %q (table %s)", idemkit.ErrNotFound, key, scope, c.adm.Table())
	}
	return nil
}

// redisWithoutRecord returns what Redis holds for a key without a record, and where: at ad (scope
// and key as the application passes them, namespace and hashing applied) or, when Redis holds
// nothing there and scope or key is given in the hashed stored form listings show, at that form as
// it is — as Admin.Get looks the record up.
func (c *cli) redisWithoutRecord(ctx context.Context, scope, key string, ad idemkit.Address) (idemkit.Address, *admin.RedisState, error) {
	rs, err := c.adm.Redis(ctx, ad.Scope, ad.Key)
	as, hashed := admin.HashedAddress(ad, scope, key)
	if err != nil || rs.Locked || rs.Cached || rs.Damaged || !hashed {
		return ad, rs, err
	}
	held, err := c.adm.Redis(ctx, as.Scope, as.Key)
	if err != nil || !held.Locked && !held.Cached && !held.Damaged {
		return ad, rs, err
	}
	return as, held, nil
}

func (c *cli) printInspect(scope, key string, ad idemkit.Address, rec *idemkit.Record, rs *admin.RedisState, now time.Time, next string) {
	t := newTable(c.stdout, "scope", scope)
	if ad.Scope != scope {
		t.row("stored scope", ad.Scope)
	}
	t.row("key", key)
	if ad.Key != key {
		t.row("stored key", ad.Key)
	}
	if rec == nil {
		t.row("record", "none")
	} else {
		status := string(rec.Status)
		switch {
		case rec.Status == idemkit.StatusProcessing && rec.GID != "":
			status += " (tied to a global transaction: never expires, never taken over)"
		case rec.Status == idemkit.StatusProcessing && rec.LeaseExpired(now):
			status += " (stuck: its lease ran out)"
		}
		if countsAsAbsent(rec, now) {
			status += " (expired: counts as absent)"
		}
		t.row("status", status)
		t.row("fence", fmt.Sprint(rec.Fence))
		t.row("owner", rec.Owner)
		if rec.Status == idemkit.StatusProcessing {
			t.row("lease", stamp(rec.LeaseUntil)+" ("+until(now, rec.LeaseUntil)+")")
		}
		t.row("claimed", stamp(rec.CreatedAt)+" ("+ago(now, rec.CreatedAt)+")")
		t.row("updated", stamp(rec.UpdatedAt)+" ("+ago(now, rec.UpdatedAt)+")")
		exp := "never"
		if !rec.ExpiresAt.IsZero() {
			exp = stamp(rec.ExpiresAt) + " (" + until(now, rec.ExpiresAt) + ")"
		}
		t.row("expires", exp)
		t.row("gid", rec.GID)
		t.row("branch", rec.BranchID)
		t.row("fingerprint", rec.Fingerprint)
		result := "none"
		if len(rec.Response) > 0 {
			result = fmt.Sprintf("%d bytes: %s", len(rec.Response), preview(rec.Response, c.o.preview))
		}
		t.row("result", result)
		t.row("error", rec.Error)
	}
	if rs != nil {
		lockS := "not held"
		if rs.Locked {
			holder := "another attempt"
			if rec != nil && rs.LockToken == rec.Owner && rec.Owner != "" {
				holder = "the record's owner"
			}
			lockS = fmt.Sprintf("held by %s (token %s), %s left", holder, rs.LockToken, roundDur(rs.LockTTL))
		}
		if rs.Damaged {
			lockS = "a damaged value (none the Locker writes: no attempt holds it), " + damagedTTL(rs)
		}
		t.row("redis lock", lockS)
		cacheS := "none"
		if rs.Cached {
			cacheS = fmt.Sprintf("%d bytes, %s left", rs.CachedSize, roundDur(rs.CacheTTL))
		}
		t.row("cached result", cacheS)
	}
	t.row("next attempt", next)
	t.flush()
}

// nextAttempt says what a new attempt with the key would get now, from the record and Redis (nil
// when unknown), following the Guard's rules: cache first, then the lock, then the record's state.
func nextAttempt(rec *idemkit.Record, rs *admin.RedisState, now time.Time) string {
	switch {
	case rs != nil && rs.Damaged:
		return "fails with 503 (idemkit.ErrLockUnavailable; a FailOpen Guard goes on without the lock): the Locker refuses the damaged lock value in Redis until it expires (" +
			damagedTTL(rs) + ") or is deleted (idemctl purge, or release of a claim, with --redis)"
	case rs != nil && rs.Cached:
		return cachedAnswer(rec)
	case rs != nil && rs.Locked:
		return fmt.Sprintf("409 in flight: the Redis lock is held (%s left)", roundDur(rs.LockTTL))
	case rec == nil:
		return "runs: a new key"
	case rec.Status == idemkit.StatusProcessing && rec.GID != "":
		return fmt.Sprintf("409/425 in flight until the global transaction's outcome is recorded (idemctl dtm %s)", rec.GID) + mismatchNote(rec)
	case rec.Status == idemkit.StatusProcessing && !rec.LeaseExpired(now):
		return fmt.Sprintf("409 in flight: the claim's lease runs %s more", roundDur(rec.LeaseUntil.Sub(now))) + mismatchNote(rec)
	case rec.Expired(now):
		return fmt.Sprintf("runs again: the record expired and is taken over (fence %d)", rec.Fence+1)
	case markRecord(rec):
		return "refused as a duplicate (idemkit.ErrDuplicate): the key is marked, and a mark keeps no result to replay; nothing runs" + mismatchNote(rec)
	case rec.Status == idemkit.StatusSucceeded:
		return "the stored result is replayed" + mismatchNote(rec)
	case rec.Status == idemkit.StatusRejected:
		return "the stored rejection is replayed" + mismatchNote(rec)
	case rec.Status == idemkit.StatusProcessing:
		return fmt.Sprintf("runs again: the stuck claim is taken over (fence %d); the sweeper would recover it first", rec.Fence+1) + mismatchNote(rec)
	default:
		return fmt.Sprintf("runs again: a retry takes the %s record over (fence %d)", rec.Status, rec.Fence+1) + mismatchNote(rec)
	}
}

// damagedTTL says how long Redis keeps a damaged lock value.
func damagedTTL(rs *admin.RedisState) string {
	if rs.DamagedTTL <= 0 {
		return "kept without expiry"
	}
	return roundDur(rs.DamagedTTL) + " left"
}

// cachedAnswer says what the cache answers a new attempt with: the answer of the finished record it
// holds, which is rec's when rec is finished (its finish, or a replay of it, cached it). A mark is
// cached too, and the Guard refuses its key's duplicates from it as from the record.
func cachedAnswer(rec *idemkit.Record) string {
	const from = " (from Redis, without reading the record)"
	switch {
	case rec == nil || !rec.Status.Terminal():
		return "the cached result is replayed" + from + "; if it is a mark's, the attempt is refused as a duplicate (idemkit.ErrDuplicate) instead"
	case markRecord(rec):
		return "refused as a duplicate (idemkit.ErrDuplicate) by the cached mark" + from + ": a mark keeps no result to replay; nothing runs" + mismatchNote(rec)
	case rec.Status == idemkit.StatusRejected:
		return "the cached rejection is replayed" + from + mismatchNote(rec)
	}
	return "the cached result is replayed" + from + mismatchNote(rec)
}

// markRecord reports whether rec was written by Mark, MarkTx or TxMark: a mark (see
// idemkit.Record.IsMark), or one a permanent error left REJECTED, which keeps the mark's lack of a
// lease. Either way the next attempt of its key gets idemkit.ErrDuplicate.
func markRecord(rec *idemkit.Record) bool {
	return rec.IsMark() || rec.Status == idemkit.StatusRejected && rec.LeaseUntil.Equal(rec.CreatedAt)
}

// mismatchNote says what a call with another payload gets from a record within its lifetime: 422 when
// the record holds a fingerprint (before any replay, in-flight answer or takeover: the Guard's judge
// compares payloads first); without one it binds no payload, and every call gets the same answer.
func mismatchNote(rec *idemkit.Record) string {
	if rec.Fingerprint == "" {
		return " (whatever the payload: the record holds no fingerprint)"
	}
	return " (a different payload gets 422)"
}
