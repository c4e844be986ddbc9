package idemkit

import (
	"context"
	"time"
)

// Store keeps dedupe records. It is the source of truth: a unique (Scope, Key) and conditional writes
// make a Guard correct even with no Locker at all.
//
// Implementations must be safe for concurrent use and must store times with at least millisecond
// precision. The package idemtest holds a conformance suite every implementation should pass.
type Store interface {
	// Insert adds rec. It returns ErrExists when a record with the same Scope and Key exists, whatever
	// its state; it never overwrites. An error matching ErrInFlight (from Insert, or from Get and
	// Update on a Store bound to a transaction) says that another attempt's write of the key, not
	// committed yet, held it longer than the Store waits (a database's lock wait timeout): nothing
	// was written, and the Guard answers the call in flight. An error matching ErrNotSent says the
	// write never reached the database (ctx ended while it waited for its turn): it never lands, and
	// the Guard does not watch for it as for a claim whose caller left (see [Guard.Wait]).
	Insert(ctx context.Context, rec *Record) error
	// Get returns the record for scope and key, or ErrNotFound.
	Get(ctx context.Context, scope, key string) (*Record, error)
	// Update replaces the record with rec's Scope and Key if its stored fence, owner and status equal
	// prev, and returns ErrFenced otherwise (including when no record exists). When rec keeps prev's
	// fence and owner (a claim's own finish, renewal or settlement), only its Status, Response, Error,
	// LeaseUntil, ExpiresAt and UpdatedAt differ from the stored record, and a Store may write only
	// those.
	Update(ctx context.Context, rec *Record, prev Version) error
	// Delete removes the record for scope and key if its stored fence, owner and status equal prev,
	// and returns ErrFenced otherwise.
	Delete(ctx context.Context, scope, key string, prev Version) error
}

// Locker is the fast layer in front of a Store: a short per-key lock that turns concurrent duplicates
// away, and a cache of finished results. They share one interface because a Guard asks for both in the
// same round trip: Acquire returns a cached result instead of locking, and Release fills the cache while
// it unlocks.
//
// Locks are never re-entrant: a second Acquire with another token fails even from the same process.
// Acquire with the token that holds the lock succeeds and leaves the lock as it is (its ttl is not
// reset: Refresh extends a lock), so a client that retries a command whose reply was lost does not
// lock its own attempt out; the Guard uses a new token per attempt.
// Implementations must be safe for concurrent use.
type Locker interface {
	// Acquire returns the cached result for key when there is one, taking no lock. Otherwise it locks
	// key with token for ttl and returns (nil, nil) — when token holds the lock already, it returns
	// (nil, nil) and leaves the lock as it is — or returns an [*InFlightError] (ErrLocked) when another
	// token holds it, with that token as its Holder when the Locker knows it (the Guard then tells a
	// duplicate with another payload from one in flight; without it, both are in flight). Any other
	// error may come after the lock was taken (a lost reply), and the Guard releases it in the
	// background, unless it matches ErrNotSent: the command was never sent and took nothing.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (cached []byte, err error)
	// Refresh extends the lock to ttl if token still holds it; ErrLockNotHeld otherwise.
	Refresh(ctx context.Context, key, token string, ttl time.Duration) error
	// Release unlocks key if token holds it, and when result is not nil caches it for cacheTTL
	// whoever holds the lock. It returns ErrLockNotHeld when the lock was gone or held by another
	// token (the result is still cached).
	Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error
}

// Peeker is implemented by Stores bound to a caller's transaction that can read a record without
// locking it: a plain read in the transaction's snapshot. [Guard.DoTx] reads through it before its
// function when the cache cannot vouch for the key, so that a duplicate of a finished key is answered
// before the function runs; a locking read there would lock the gap where a new key goes and make
// concurrent transactions deadlock (MySQL). A record committed after the snapshot is not seen by Peek;
// DoTx then meets it when it writes the record. record.Store and memory.Store implement it.
type Peeker interface {
	// Peek returns the record for scope and key as the transaction sees it, without locking, or
	// ErrNotFound.
	Peek(ctx context.Context, scope, key string) (*Record, error)
}

// PendingQuery selects the records a transaction reconciler settles (see [PendingLister]).
type PendingQuery struct {
	// Scopes are the stored scopes to list (namespace applied, as [Guard.Pending] passes them). A
	// reconciler settles only the records of its own scopes, never another application's. Required:
	// an empty list selects nothing.
	Scopes []string
	// Now is the time leases are compared with.
	Now time.Time
	// Limit bounds how many records are returned; below 1, none.
	Limit int
	// After, when set, pages through the listing: only records after it in the listing's order
	// (lease_until, then scope, then key) are returned. Its LeaseUntil, Scope and Key are used.
	After *Record
}

// PendingLister is implemented by Stores that can list the records a transaction reconciler must
// settle: PROCESSING records of q.Scopes that carry a GID and whose lease ran out by q.Now, oldest
// lease first (then by scope and key, so that q.After can page), whether or not their expiry passed (a record tied to an unsettled transaction never
// expires). The record package's and the memory package's Stores implement it.
type PendingLister interface {
	Pending(ctx context.Context, q PendingQuery) ([]*Record, error)
}
