package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// The package knows nothing of lock.Locker's Redis layout: it reads and cleans a record's key through
// a Locker with the application's prefix (lock.Locker.State, Release, Forget), so a change of the
// layout is made in package lock only. TestRedisStateFollowsLocker checks the result against the
// real Locker.

// RedisState is what Redis holds for one record: nothing, the lock of a running attempt, or a cached
// result (one Redis key holds either).
type RedisState struct {
	// Key is the Redis key that holds the record's lock or cached result: the record's
	// idemkit.LockKey as the Locker names it in Redis (its prefix, a hash tag; lock.Locker.Key),
	// what redis-cli reads.
	Key string
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
	// Damaged: the key holds a damaged lock value, one that starts like a lock but is none the
	// Locker wrote, or a value of another Redis type (a hash, a list) (lock.ErrDamagedLock). No attempt holds it, yet a Guard's Locker refuses it: the
	// key's calls fail with idemkit.ErrLockUnavailable (or run without the lock under FailOpen) for
	// as long as Redis keeps it, DamagedTTL (0: no expiry). [Admin.Purge], [Admin.Release] and
	// [Admin.ForgetCached] delete it, as lock.Locker.Forget does.
	Damaged    bool
	DamagedTTL time.Duration
}

// Redis returns what Redis holds for the record at storedScope and storedKey (as stored, e.g.
// [idemkit.Address] or an [Entry]'s), in one round trip ([lock.Locker.State]). A damaged lock value
// is reported as Damaged. It returns an error when the Admin has no Redis client, when Redis fails,
// or when the key holds another value the Locker never writes.
func (a *Admin) Redis(ctx context.Context, storedScope, storedKey string) (*RedisState, error) {
	if a.lk == nil {
		return nil, errors.New("admin: no Redis client configured")
	}
	key := idemkit.LockKey(storedScope, storedKey)
	s, err := a.lk.State(ctx, key)
	if errors.Is(err, lock.ErrDamagedLock) {
		return &RedisState{Key: a.lk.Key(key), Damaged: true, DamagedTTL: s.TTL}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: reading Redis: %w", err)
	}
	st := &RedisState{Key: a.lk.Key(key)}
	switch {
	case s.Locked:
		st.Locked, st.LockToken, st.LockTTL = true, s.Token, s.TTL
	case s.Cached:
		st.Cached, st.CachedSize, st.CacheTTL = true, s.Size, s.TTL
	}
	return st, nil
}

// ForgetCached deletes the cached result Redis holds for the record at storedScope and storedKey,
// or a damaged lock value (see [RedisState].Damaged), leaving a lock alone (an attempt running under
// it), and reports whether it deleted one. It is for a result whose record is already gone (purged
// without Redis): [Admin.Purge] clears a record's own.
func (a *Admin) ForgetCached(ctx context.Context, storedScope, storedKey string) (bool, error) {
	if a.lk == nil {
		return false, errors.New("admin: no Redis client configured")
	}
	ok, err := a.lk.Forget(ctx, idemkit.LockKey(storedScope, storedKey), "") // no token holds a lock
	if err != nil {
		return false, fmt.Errorf("admin: clearing Redis: %w", err)
	}
	return ok, nil
}

// releaseLock deletes the lock of rec's holder if that holder (rec's owner) still holds it, so that
// the next attempt is not turned away as in flight, or a damaged lock value, which would turn it away
// as unavailable. Another attempt's lock, or a cached result, stays.
func (a *Admin) releaseLock(ctx context.Context, rec *idemkit.Record) error {
	key := idemkit.LockKey(rec.Scope, rec.Key)
	err := lock.ErrDamagedLock // a claim without an owner holds no lock: only a damaged value may be there
	if rec.Owner != "" {
		err = a.lk.Release(ctx, key, rec.Owner, nil, 0)
	}
	if err == nil || !errors.Is(err, idemkit.ErrLockNotHeld) && !errors.Is(err, lock.ErrDamagedLock) {
		return wrapRedis(err)
	}
	// Not the holder's lock: the key may hold a damaged value, which no attempt holds. Forget deletes
	// it (nothing but its expiry or a hand changes such a value, so it is the one Forget meets).
	if _, err := a.lk.State(ctx, key); !errors.Is(err, lock.ErrDamagedLock) {
		return nil // gone, another attempt's lock, a cached result; a failed read leaves all as it is
	}
	_, err = a.lk.Forget(ctx, key, "")
	return wrapRedis(err)
}

// wrapRedis says a Redis error happened clearing the key.
func wrapRedis(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("admin: clearing Redis: %w", err)
}

// forget deletes rec's cached result, and for a claim (PROCESSING) its holder's lock if rec's owner
// still holds it, so that no duplicate is answered from the cache after the record is gone; a damaged
// lock value goes too (lock.Locker.Forget). Another
// attempt's lock stays, and so does the lock of a finished record's owner: in Mark mode the record is
// SUCCEEDED while its function still runs under that lock, and deleting it would let a duplicate run
// beside it.
func (a *Admin) forget(ctx context.Context, rec *idemkit.Record) error {
	owner := ""
	if rec.Status == idemkit.StatusProcessing {
		owner = rec.Owner
	}
	if _, err := a.lk.Forget(ctx, idemkit.LockKey(rec.Scope, rec.Key), owner); err != nil {
		return fmt.Errorf("admin: clearing Redis: %w", err)
	}
	return nil
}

// unlocked returns ErrRefused when Redis holds a lock on the key of rec, a SUCCEEDED or REJECTED record: its holder (a Mark-mode
// function still running, or an attempt answering from the record) caches the record as it releases
// the lock, which would answer duplicates after the record is purged.
func (a *Admin) unlocked(ctx context.Context, rec *idemkit.Record) error {
	s, err := a.lk.State(ctx, idemkit.LockKey(rec.Scope, rec.Key))
	if errors.Is(err, lock.ErrDamagedLock) {
		return nil // held by no attempt: the purge deletes it (see forget)
	}
	if err != nil {
		return fmt.Errorf("admin: reading Redis before the purge (purge with force to skip it): %w", err)
	}
	if !s.Locked {
		return nil
	}
	who := "an attempt answering from the record"
	if s.Token == rec.Owner {
		who = "the attempt that wrote the record (a Mark-mode function still running, or its finish)"
	}
	return fmt.Errorf("%w: Redis holds the lock of %s for %s more: releasing it caches the record again, which would answer duplicates once the record is gone; wait for it, or purge only with force",
		ErrRefused, who, s.TTL.Round(time.Millisecond))
}

// newLocker returns the Locker the Admin reads Redis through, or nil without a client.
func newLocker(o *Options) *lock.Locker {
	if o.Redis == nil {
		return nil
	}
	return lock.New(o.Redis, &lock.Options{Prefix: o.RedisPrefix})
}
